/**
 * The local-agent's CLI in its own process, as on a GPU host. The demo removes the directory
 * the agent writes in, so it holds the process from the moment it is spawned (a Ctrl-C may
 * come while the agent still starts) and can wait for it to have exited.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { realClock } from "../../local-agent/src/clock";
import { stopGroup } from "../../local-agent/src/runs/process-group";
import { REPO_ROOT } from "../local/exchange";

/** How long the agent gets to stop cleanly after SIGTERM before it is killed. */
const GRACE_MS = 3_000;
/** How often a stop looks whether the agent's group is gone. */
const STOP_POLL_MS = 50;

export class AgentProcess {
  /** The trainer facade's URL, once the agent says it listens; rejects if the agent exits first. */
  readonly facade: Promise<string>;
  private readonly child: ChildProcess;
  private readonly exited: Promise<void>;

  constructor(env: Record<string, string>) {
    // Detached: the leader of a process group of its own, so that stopping it reaches whatever
    // it starts as well, and a terminal's Ctrl-C reaches it only through the demo's stop.
    this.child = spawn(process.execPath, ["--import", "tsx", join(REPO_ROOT, "local-agent", "src", "cli.ts")], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    this.exited = new Promise((resolve) => {
      this.child.once("exit", () => resolve());
      // Never spawned: there is no process to wait for.
      this.child.once("error", () => {
        if (this.child.pid === undefined) resolve();
      });
    });
    this.facade = this.facadeUrl();
  }

  /** SIGTERM to its group, then SIGKILL if it has not exited after GRACE_MS; resolves once the group is gone. */
  async stop(): Promise<void> {
    const pid = this.child.pid;
    if (pid === undefined || this.child.exitCode !== null || this.child.signalCode !== null) return;
    let reaped = false;
    void this.exited.then(() => (reaped = true));
    await stopGroup(pid, { graceMs: GRACE_MS, clock: realClock, pollMs: STOP_POLL_MS, leaderReaped: () => reaped });
  }

  private facadeUrl(): Promise<string> {
    const lines: string[] = [];
    return new Promise((resolve, reject) => {
      const onLine = (l: string) => {
        lines.push(l);
        const m = /trainer facade on (http:\/\/[^\s;,]+)/.exec(l);
        if (m) resolve(m[1] as string);
      };
      createInterface({ input: this.child.stderr! }).on("line", onLine);
      createInterface({ input: this.child.stdout! }).on("line", onLine);
      this.child.once("exit", (code, signal) => reject(new Error(`the agent exited (${code ?? signal}):\n${lines.slice(-20).join("\n")}`)));
      this.child.once("error", reject);
    });
  }
}
