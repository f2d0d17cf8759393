/**
 * `npm start` (scripts/start.ts) run for real in a copy of the repository, so that its
 * .dev.vars, .local/ and TMPDIR are the test's own, each start in its own process group, which
 * the test ends whatever happens.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { REPO_ROOT } from "../../scripts/local/exchange";

/** A copy of what `npm start` needs, with the repository's node_modules linked in; removed by `removeDir`. */
export function copyRepo(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), `npm-start-${prefix}-`));
  for (const p of ["src", "scripts", "migrations", "wrangler.toml", "package.json", "tsconfig.json"]) cpSync(join(REPO_ROOT, p), join(dir, p), { recursive: true });
  symlinkSync(join(REPO_ROOT, "node_modules"), join(dir, "node_modules"));
  mkdirSync(join(dir, "tmp"));
  return dir;
}

export const removeDir = (dir: string | undefined) => dir && rmSync(dir, { recursive: true, force: true });

export type Started = {
  child: ChildProcess;
  output(): string;
  /** The line of the output that starts with `[start] failed`, or "". */
  failure(): string;
  /** Resolves true once the output contains `text`, false if the process exits (or `ms` pass) first. */
  waitFor(text: string, ms?: number): Promise<boolean>;
  exited(): Promise<number | null>;
  /** Sends `signal` to the process the test started (not its group), as a process manager does. */
  signal(signal: NodeJS.Signals): void;
  /** SIGKILLs the whole process group, if anything of it is left. */
  kill(): void;
};

function started(command: string, args: string[], dir: string, env: Record<string, string>): Started {
  const child = spawn(command, args, {
    cwd: dir,
    detached: true,
    env: { ...process.env, TMPDIR: join(dir, "tmp"), WRANGLER_SEND_METRICS: "false", NO_COLOR: "1", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout!.on("data", (b: Buffer) => (out += b.toString()));
  child.stderr!.on("data", (b: Buffer) => (out += b.toString()));
  const exit = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
  return {
    child,
    output: () => out,
    failure: () => out.split("\n").find((l) => l.startsWith("[start] failed")) ?? "",
    exited: () => exit,
    waitFor: async (text, ms = 150_000) => {
      const t0 = Date.now();
      while (!out.includes(text)) {
        if (child.exitCode !== null || child.signalCode !== null || Date.now() - t0 > ms) return out.includes(text);
        await new Promise((r) => setTimeout(r, 100));
      }
      return true;
    },
    signal: (signal) => child.kill(signal),
    kill: () => {
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        // the group is gone
      }
    },
  };
}

/** scripts/start.ts as package.json's "start" runs it (`exec node --import tsx ...`), without npm around it. */
export const nodeStart = (dir: string, env: Record<string, string>, args: string[] = []): Started =>
  started(process.execPath, ["--import", "tsx", "scripts/start.ts", ...args], dir, env);

/** `npm start` itself, with the machine's npm. */
export const npmStart = (dir: string, env: Record<string, string>): Started => started("npm", ["start"], dir, env);

/** Pids of the live processes (not zombies) whose parent is `ppid`, with their command names. */
export function childrenOf(ppid: number): { pid: number; comm: string }[] {
  const found: { pid: number; comm: string }[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const close = stat.lastIndexOf(")");
      const comm = stat.slice(stat.indexOf("(") + 1, close);
      const [state, parent] = stat.slice(close + 2).split(" ");
      if (Number(parent) === ppid && state !== "Z") found.push({ pid: Number(name), comm });
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** Every live process under `pid`, itself excluded. */
export function descendants(pid: number): { pid: number; comm: string }[] {
  return childrenOf(pid).flatMap((k) => [k, ...descendants(k.pid)]);
}

export function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0] !== "Z";
  } catch {
    return false;
  }
}
