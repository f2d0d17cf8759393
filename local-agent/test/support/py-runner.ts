/**
 * Runs fixtures/runner.py (AgentJet's runner messages, in Python with pyzmq) and collects the
 * events it prints, one JSON object per line.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { waitUntil } from "./wait";

/** Debian's python3 has python3-zmq; a pyenv or venv python first on PATH may not. */
export const PYTHON = process.env.ROLLOUT_TEST_PYTHON ?? "/usr/bin/python3";
const RUNNER = join(import.meta.dirname, "..", "fixtures", "runner.py");

export type RunnerEvent = {
  event: "started" | "registered" | "register_failed" | "listening" | "result" | "acked" | "reset" | "abort" | "closed" | "done";
  episode?: string;
  addr?: string;
  payload?: unknown;
  response?: unknown;
  detail?: unknown;
  t: number;
};

export type PyRunnerOptions = { facade?: string; ipcDir: string; episodes: string[]; tcp?: boolean; ackDelay?: number; register?: boolean; stay?: boolean };

export class PyRunner {
  readonly events: RunnerEvent[] = [];
  readonly stderr: string[] = [];
  private readonly child: ChildProcess;
  private exited = false;

  constructor(o: PyRunnerOptions) {
    const args = [RUNNER, "--ipc-dir", o.ipcDir];
    if (o.facade) args.push("--facade", o.facade);
    if (o.tcp) args.push("--tcp");
    if (o.ackDelay) args.push("--ack-delay", String(o.ackDelay));
    if (o.register === false) args.push("--no-register");
    if (o.stay) args.push("--stay");
    this.child = spawn(PYTHON, [...args, ...o.episodes], { stdio: ["pipe", "pipe", "pipe"] });
    this.child.on("exit", () => (this.exited = true));
    createInterface({ input: this.child.stdout! }).on("line", (line) => this.events.push(JSON.parse(line) as RunnerEvent));
    createInterface({ input: this.child.stderr! }).on("line", (line) => this.stderr.push(line));
  }

  of(event: RunnerEvent["event"], episode?: string): RunnerEvent[] {
    return this.events.filter((e) => e.event === event && (episode === undefined || e.episode === episode));
  }

  waitFor(event: RunnerEvent["event"], episode?: string, timeoutMs = 20_000): Promise<RunnerEvent> {
    return waitUntil(
      () => {
        if (this.exited && this.of(event, episode).length === 0 && this.of("done").length === 0) throw new Error(`runner.py exited: ${this.stderr.join("\n")}`);
        return this.of(event, episode)[0];
      },
      `runner event ${event}${episode ? ` for ${episode}` : ""} (seen: ${this.events.map((e) => `${e.event}:${e.episode ?? ""}`).join(", ")})`,
      timeoutMs,
    );
  }

  /** The address each episode listens on (after "listening"). */
  addr(episode: string): string {
    const e = this.of("listening", episode)[0];
    if (!e?.addr) throw new Error(`episode ${episode} is not listening`);
    return e.addr;
  }

  kill(): void {
    if (!this.exited) this.child.kill("SIGKILL");
  }
}
