/**
 * The trainer's output file. The trainer writes to it directly (an O_APPEND file descriptor,
 * not a pipe through the agent), so a trainer survives the agent being killed: with a pipe,
 * its next write would hit a closed pipe and kill it. The price is how rotation works:
 * copy-then-truncate, like logrotate's copytruncate. Appends after the truncate land at the
 * new end of the file; lines written between the copy and the truncate can be lost, which is
 * acceptable for a log and is why rotation is checked only every few seconds.
 *
 * The rollout workers' and the runs' processes write their logs the same way (RunProcess), and
 * are rotated the same way (rotateLog), at the same size: any of them left to grow fills the disk.
 */
import { copyFile } from "node:fs/promises";
import { closeSync, existsSync, ftruncateSync, openSync, readdirSync, renameSync, rmSync, statSync, unlinkSync, writeSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { openPrivateAppend } from "./host-files";
import { tailFile } from "./runs/process-group";

export const TRAINER_LOG = "trainer.log";

export class TrainerLog {
  readonly path: string;
  constructor(readonly dir: string) {
    this.path = join(dir, TRAINER_LOG);
  }

  /** A file descriptor for a child's stdout and stderr; the caller closes it once spawned. */
  openForChild(): number {
    return openPrivateAppend(this.path);
  }

  /** The last `maxLines` lines of output (at most `maxBytes` bytes), for the engine's status detail. */
  tail(maxLines = 40, maxBytes = 8192): string {
    return tailFile(this.path, maxLines, maxBytes);
  }
}

/**
 * The line a log gets before each start of its process. Not a gate: on a full log disk the
 * process starts all the same (a throw here left its start unanswered, handed out again).
 */
export function startBanner(fd: number, now: number, command: string): void {
  try {
    writeSync(fd, `\n===== ${new Date(now).toISOString()} rollout-agent starts: ${command}\n`);
  } catch {
    // The disk refuses the banner as it will the process's output: nothing to add to that.
  }
}

/** Rotates the log at `path` -> `path`.1 -> ... -> `path`.`keep` once it is larger than maxBytes (copy, then truncate). Returns whether it did. */
export async function rotateLog(path: string, maxBytes: number, keep: number): Promise<boolean> {
  let size: number;
  try {
    size = statSync(path).size;
  } catch {
    return false;
  }
  if (size <= maxBytes) return false;
  // Copied aside before any older copy is dropped: on a disk something else filled, a copy that
  // fails at every try must not delete one older copy each time (they hold the crash output an
  // operator looks for). A partial copy is removed, as it holds what space is left. Copied on
  // libuv's threads, not the event loop: a log of 50 MB copied in place held the gateway's calls.
  const fresh = `${path}.rotating`;
  try {
    await copyFile(path, fresh);
  } catch (e) {
    rmSync(fresh, { force: true });
    throw e;
  }
  // The oldest kept copy goes, and any past it: an agent that ran with more logFiles left them.
  const copy = `${basename(path)}.`;
  for (const name of readdirSync(dirname(path))) {
    const n = name.startsWith(copy) ? Number(name.slice(copy.length)) : Number.NaN;
    if (Number.isInteger(n) && n >= keep) unlinkSync(join(dirname(path), name));
  }
  for (let i = keep - 1; i >= 1; i--) {
    const from = `${path}.${i}`;
    if (existsSync(from)) renameSync(from, `${path}.${i + 1}`);
  }
  renameSync(fresh, `${path}.1`);
  const fd = openSync(path, "r+");
  try {
    ftruncateSync(fd, 0);
  } finally {
    closeSync(fd);
  }
  return true;
}
