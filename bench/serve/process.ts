/**
 * A target in a process of its own (the exchange the chaos run SIGKILLs, the local agent, a
 * bare proxy): spawned with Node and tsx, ready once a line of its output matches `ready`.
 * Every line it prints is kept, for the report and for a failure's message.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";

export { freePort } from "../../scripts/local/free-port";

export type ProcessTarget = {
  child: ChildProcess;
  /** The match of the ready line: its groups carry what the process announced (its URL, its port). */
  ready: RegExpExecArray;
  /** Every line of its stdout and stderr so far. */
  lines: string[];
  /** Sends `signal` (default SIGKILL) to the process, or to its whole group when it was started `detached`. */
  kill(signal?: NodeJS.Signals): void;
  /** Resolves once it has exited (at once if it already has); rejects after `timeoutMs`. */
  exited(timeoutMs?: number): Promise<void>;
  /** SIGTERM, then waits for the exit. */
  stop(timeoutMs?: number): Promise<void>;
};

export async function startProcess(o: {
  /** A TypeScript or JavaScript file run as `node --import tsx <script> ...args`. */
  script: string;
  args?: string[];
  /** Added to this process's environment. */
  env?: Record<string, string>;
  ready: RegExp;
  /** Names the process in errors. */
  what: string;
  timeoutMs?: number;
  /** Its own process group, so that kill() reaches its children too (Miniflare's workerd). */
  detached?: boolean;
  /** Its stdin stays an open pipe, for a process that exits when the pipe closes. */
  stdinPipe?: boolean;
}): Promise<ProcessTarget> {
  const child = spawn(process.execPath, ["--import", "tsx", o.script, ...(o.args ?? [])], {
    env: { ...process.env, ...o.env },
    detached: o.detached ?? false,
    stdio: [o.stdinPipe ? "pipe" : "ignore", "pipe", "pipe"],
  });
  const lines: string[] = [];
  const exit = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const gone = () => child.exitCode !== null || child.signalCode !== null;
  const exited = async (timeoutMs = 30_000): Promise<void> => {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${o.what} did not exit in ${timeoutMs / 1000} s`)), timeoutMs)));
    await Promise.race([exit, late]).finally(() => clearTimeout(timer));
  };
  const kill = (signal: NodeJS.Signals = "SIGKILL"): void => {
    if (gone() || child.pid === undefined) return;
    if (o.detached) process.kill(-child.pid, signal);
    else child.kill(signal);
  };
  const ready = await new Promise<RegExpExecArray>((resolve, reject) => {
    const timeoutMs = o.timeoutMs ?? 60_000;
    const timer = setTimeout(() => reject(new Error(`${o.what} was not ready in ${timeoutMs / 1000} s:\n${lines.join("\n")}`)), timeoutMs);
    const onLine = (l: string): void => {
      lines.push(l);
      const m = o.ready.exec(l);
      if (m) {
        clearTimeout(timer);
        resolve(m);
      }
    };
    createInterface({ input: child.stdout! }).on("line", onLine);
    createInterface({ input: child.stderr! }).on("line", onLine);
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${o.what} exited (${code ?? signal}) before it was ready:\n${lines.join("\n")}`));
    });
  }).catch((e: unknown) => {
    kill();
    throw e;
  });
  return {
    child,
    ready,
    lines,
    kill,
    exited,
    stop: async (timeoutMs) => {
      kill("SIGTERM");
      await exited(timeoutMs);
    },
  };
}
