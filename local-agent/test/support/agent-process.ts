/** Runs the agent's CLI as a real child process (for SIGKILL and signal tests). */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import type { Suite } from "./suite";
import { waitUntil } from "./wait";

const CLI = join(import.meta.dirname, "..", "..", "src", "cli.ts");

/** ROLLOUT_* settings for an agent process serving the suite's engine: free ports, short waits, files in the test's directory. */
export function suiteAgentEnv(t: Suite): Record<string, string> {
  return {
    ROLLOUT_SERVER: t.ex.url,
    ROLLOUT_ENGINE: t.engine.name,
    ROLLOUT_TRAINER_TOKEN: t.engine.tokens.trainer,
    ROLLOUT_FACADE_PORT: "0",
    // Not the gateway's default port: another agent on this host (a parallel test run) may hold it.
    ROLLOUT_GATEWAY_PORT: "0",
    ROLLOUT_STATE_DIR: join(t.dir, "state"),
    ROLLOUT_LOG_DIR: join(t.dir, "logs"),
    ROLLOUT_POLL_WAIT_SECONDS: "1",
    ROLLOUT_HEARTBEAT_SECONDS: "0.5",
  };
}

export class AgentProcess {
  readonly lines: string[] = [];
  readonly child: ChildProcess;
  exit: { code: number | null; signal: string | null } | null = null;

  /**
   * `env` holds the ROLLOUT_* settings; `args` extra flags; `program` what runs the agent: by
   * default the repository's CLI on the Node 22 that npm scripts run under (tsx loads the
   * TypeScript), else e.g. an installed package's `rollout-agent`.
   */
  constructor(env: Record<string, string>, args: string[] = [], program: readonly string[] = [process.execPath, "--import", "tsx", CLI]) {
    const [command, ...programArgs] = program as [string, ...string[]];
    this.child = spawn(command, [...programArgs, ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    createInterface({ input: this.child.stderr! }).on("line", (l) => {
      this.lines.push(l);
      if (process.env.AGENT_TEST_LOG) process.stderr.write(`[agent ${this.child.pid}] ${l}\n`);
    });
    createInterface({ input: this.child.stdout! }).on("line", (l) => this.lines.push(l));
    this.child.on("exit", (code, signal) => (this.exit = { code, signal }));
  }

  waitForLine(re: RegExp, what: string, timeoutMs = 20_000): Promise<RegExpExecArray> {
    return waitUntil(() => {
      for (const l of this.lines) {
        const m = re.exec(l);
        if (m) return m;
      }
      if (this.exit) throw new Error(`the agent exited (${JSON.stringify(this.exit)}) before ${what}:\n${this.lines.join("\n")}`);
      return undefined;
    }, what, timeoutMs);
  }

  waitForExit(timeoutMs = 20_000): Promise<{ code: number | null; signal: string | null }> {
    return waitUntil(() => this.exit, "the agent to exit", timeoutMs);
  }

  kill(signal: NodeJS.Signals = "SIGKILL"): void {
    if (this.exit === null) this.child.kill(signal);
  }
}
