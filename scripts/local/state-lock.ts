/**
 * One `npm start` at a time over a state directory. Two would each run their own copy of every
 * engine's Durable Object over the same SQLite files (Miniflare takes no lock of its own), and
 * the copies would disagree: a token revoked through one still works on the other.
 *
 * The lock is a file beside the directory (`<dir>.lock`) holding its owner's pid, created
 * exclusively. A lock whose process is gone (SIGKILL, a crash, a reboot) is taken over; the
 * owner removes it when its process exits, however it exits short of SIGKILL. After a reboot the
 * pid may well be another process's (a container's pids come out the same every boot), so the
 * lock also holds the boot's id and the process's start time (Linux's /proc): a pid alive under
 * another boot or start time is not the owner.
 */
import { mkdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";

export type StateLock = {
  path: string;
  /** The pid of the gone process whose lock was taken over, if one was. */
  tookOverFrom: number | null;
};

/** Where the lock's owner is: its pid and, where /proc tells them, the boot and its start time. */
type Owner = { pid: number; boot: string | null; started: string | null };

/** The kernel's id of this boot; null where there is no /proc. */
function bootId(): string | null {
  try {
    return readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
  } catch {
    return null;
  }
}

/** When process `pid` started, in clock ticks since boot (field 22 of /proc/<pid>/stat); null if unknown. */
function startTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) may hold spaces and parentheses: count from after its last ')'.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? null;
  } catch {
    return null;
  }
}

/** Creates the lock naming this process; false if a lock is there already. */
function create(path: string): boolean {
  const me = [process.pid, bootId(), startTime(process.pid)].filter((v) => v !== null).join(" ");
  try {
    writeFileSync(path, `${me}\n`, { flag: "wx" });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw err;
  }
}

/** The owner a lock names; null if it names none (being written this instant, or damaged); undefined if it is gone. */
function owner(path: string): Owner | null | undefined {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
  // A lock of an older start holds the pid alone.
  const m = /^(\d+)(?: (\S+) (\d+))?\s*$/.exec(text);
  return m === null ? null : { pid: Number(m[1]), boot: m[2] ?? null, started: m[3] ?? null };
}

/**
 * Whether the lock's owner still runs: its pid exists (EPERM: it does, another user's) and, when
 * the lock says so, under the same boot and start time. Our own pid in an old lock is a reused one.
 */
function running(o: Owner): boolean {
  if (o.pid === process.pid) return false;
  try {
    process.kill(o.pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  if (o.boot === null) return isStart(o.pid);
  if (bootId() !== null && o.boot !== bootId()) return false;
  const started = startTime(o.pid);
  return o.started === null || started === null || o.started === started;
}

/** For a lock that names a pid alone (an older start's): whether that process is a start at all, where /proc tells. */
function isStart(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("start.ts");
  } catch {
    return true;
  }
}

/** Removes the lock if it still names `pid`; gone already is as good. */
function removeIfOwnedBy(path: string, pid: number): void {
  try {
    if (owner(path)?.pid === pid) unlinkSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
}

/** Synchronous: the 'exit' event runs nothing asynchronous. */
function releaseAtExit(path: string): void {
  process.on("exit", () => removeIfOwnedBy(path, process.pid));
}

/**
 * Locks `stateDir` for this process, or throws naming the process that has it. The message
 * names the lock file too: a pid reused by an unrelated process after a crash keeps a lock
 * looking held, and deleting the file is then the way out.
 */
export function lockStateDir(stateDir: string): StateLock {
  const path = `${resolve(stateDir)}.lock`;
  mkdirSync(dirname(path), { recursive: true });
  let tookOverFrom: number | null = null;
  while (!create(path)) {
    const held = owner(path);
    if (held === undefined) continue; // its owner removed it just now
    if (held === null) throw new Error(`${path} exists but names no process: another npm start may be starting. If none is, delete ${path}.`);
    const pid = held.pid;
    // A second stale lock right after taking one over: another start is racing us, let it have the state.
    if (running(held) || tookOverFrom !== null) {
      throw new Error(`${stateDir} is in use by another npm start (pid ${pid}): stop that one first. If process ${pid} is not an npm start, delete ${path}.`);
    }
    // Its process is gone. Removed only if it still names that one: another start may have taken it over meanwhile.
    removeIfOwnedBy(path, pid);
    tookOverFrom = pid;
  }
  releaseAtExit(path);
  return { path, tookOverFrom };
}
