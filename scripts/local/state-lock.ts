/**
 * One `npm start` at a time over a state directory. Two would each run their own copy of every
 * engine's Durable Object over the same SQLite files (Miniflare takes no lock of its own), and
 * the copies would disagree: a token revoked through one still works on the other.
 *
 * The lock is a file beside the directory (`<dir>.lock`) holding its owner's pid, created
 * exclusively. A lock whose process is gone (SIGKILL, a crash, a reboot) is taken over; the
 * owner removes it when its process exits, however it exits short of SIGKILL. After a reboot the
 * pid may well be another process's (a container's pids come out the same every boot), so a
 * second file, `<dir>.lock.owner`, holds the pid with the boot's id and the process's start time
 * (Linux's /proc): a pid alive under another boot or start time is not the owner. The lock itself
 * keeps holding the pid alone, which is what an older checkout's start reads (a bisect over the
 * same state directory).
 */
import { mkdirSync, readFileSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
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

const ownerPath = (path: string): string => `${path}.owner`;

/** Creates the lock naming this process, and its owner file; false if a lock is there already. */
function create(path: string): boolean {
  try {
    writeFileSync(path, `${process.pid}\n`, { flag: "wx" });
    // "-" for what /proc does not tell, so that the fields keep their places.
    writeFileSync(ownerPath(path), `${process.pid} ${bootId() ?? "-"} ${startTime(process.pid) ?? "-"}\n`);
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
  if (!/^\d+\s*$/.test(text)) return null;
  const pid = Number(text);
  // The owner file counts only if it names the same pid: an older start that took the lock over wrote none.
  let who: string[] = [];
  try {
    who = readFileSync(ownerPath(path), "utf8").trim().split(" ");
  } catch {
    // None: an older start's lock.
  }
  const known = (v: string | undefined): string | null => (v === undefined || v === "-" ? null : v);
  return who[0] === String(pid) ? { pid, boot: known(who[1]), started: known(who[2]) } : { pid, boot: null, started: null };
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
  if (o.boot === null && o.started === null) return isStart(o.pid);
  if (o.boot !== null && bootId() !== null && o.boot !== bootId()) return false;
  const started = startTime(o.pid);
  return o.started === null || started === null || o.started === started;
}

/** For a lock whose owner is not otherwise known (an older start's): whether that process is a start at all, where /proc tells. */
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
    if (owner(path)?.pid !== pid) return;
    rmSync(ownerPath(path), { force: true });
    unlinkSync(path);
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
