/** Runs the agent's CLI as a real child process (for SIGKILL and signal tests). */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { waitUntil } from "./wait";

const CLI = join(import.meta.dirname, "..", "..", "src", "cli.ts");

export class AgentProcess {
  readonly lines: string[] = [];
  readonly child: ChildProcess;
  exit: { code: number | null; signal: string | null } | null = null;

  /** `env` holds the ROLLOUT_* settings; `args` extra flags. */
  constructor(env: Record<string, string>, args: string[] = []) {
    // process.execPath is the Node 22 that npm scripts run under; tsx loads the TypeScript.
    this.child = spawn(process.execPath, ["--import", "tsx", CLI, ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
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
