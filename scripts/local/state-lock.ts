/**
 * One `npm start` at a time over a state directory. Two would each run their own copy of every
 * engine's Durable Object over the same SQLite files (Miniflare takes no lock of its own), and
 * the copies would disagree: a token revoked through one still works on the other.
 *
 * The lock is a file beside the directory (`<dir>.lock`) holding its owner's pid, created
 * exclusively. A lock whose process is gone (SIGKILL, a crash, a reboot) is taken over; the
 * owner removes it when its process exits, however it exits short of SIGKILL.
 */
import { mkdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";

export type StateLock = {
  path: string;
  /** The pid of the gone process whose lock was taken over, if one was. */
  tookOverFrom: number | null;
};

/** Creates the lock holding this process's pid; false if a lock is there already. */
function create(path: string): boolean {
  try {
    writeFileSync(path, `${process.pid}\n`, { flag: "wx" });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw err;
  }
}

/** The pid a lock holds; null if it holds none (being written this instant, or damaged); undefined if it is gone. */
function owner(path: string): number | null | undefined {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
  return /^\d+\s*$/.test(text) ? Number(text) : null;
}

/** Whether a process `pid` exists (EPERM: it does, another user's). Our own pid in an old lock is a reused one. */
function running(pid: number): boolean {
  if (pid === process.pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Removes the lock if it still names `pid`; gone already is as good. */
function removeIfOwnedBy(path: string, pid: number): void {
  try {
    if (owner(path) === pid) unlinkSync(path);
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
    const pid = owner(path);
    if (pid === undefined) continue; // its owner removed it just now
    if (pid === null) throw new Error(`${path} exists but names no process: another npm start may be starting. If none is, delete ${path}.`);
    // A second stale lock right after taking one over: another start is racing us, let it have the state.
    if (running(pid) || tookOverFrom !== null) {
      throw new Error(`${stateDir} is in use by another npm start (pid ${pid}): stop that one first. If process ${pid} is not an npm start, delete ${path}.`);
    }
    // Its process is gone. Removed only if it still names that one: another start may have taken it over meanwhile.
    removeIfOwnedBy(path, pid);
    tookOverFrom = pid;
  }
  releaseAtExit(path);
  return { path, tookOverFrom };
}
