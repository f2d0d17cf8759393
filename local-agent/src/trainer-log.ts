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
import { closeSync, copyFileSync, existsSync, ftruncateSync, openSync, renameSync, rmSync, statSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { openPrivateAppend } from "./host-files";
import { tailFile } from "./runs/process-group";

export const TRAINER_LOG = "trainer.log";

export class TrainerLog {
  readonly path: string;
  constructor(
    readonly dir: string,
    private readonly maxBytes: number,
    private readonly keep: number,
  ) {
    this.path = join(dir, TRAINER_LOG);
  }

  /** A file descriptor for a child's stdout and stderr; the caller closes it once spawned. */
  openForChild(): number {
    return openPrivateAppend(this.path);
  }

  /** Rotates trainer.log -> trainer.log.1 -> ... once it is larger than maxBytes. Returns whether it did. */
  rotateIfNeeded(): boolean {
    return rotateLog(this.path, this.maxBytes, this.keep);
  }

  /** The last `maxLines` lines of output (at most `maxBytes` bytes), for the engine's status detail. */
  tail(maxLines = 40, maxBytes = 8192): string {
    return tailFile(this.path, maxLines, maxBytes);
  }
}

/** Rotates the log at `path` -> `path`.1 -> ... -> `path`.`keep` once it is larger than maxBytes (copy, then truncate). Returns whether it did. */
export function rotateLog(path: string, maxBytes: number, keep: number): boolean {
  let size: number;
  try {
    size = statSync(path).size;
  } catch {
    return false;
  }
  if (size <= maxBytes) return false;
  const oldest = `${path}.${keep}`;
  if (existsSync(oldest)) unlinkSync(oldest);
  for (let i = keep - 1; i >= 1; i--) {
    const from = `${path}.${i}`;
    if (existsSync(from)) renameSync(from, `${path}.${i + 1}`);
  }
  try {
    copyFileSync(path, `${path}.1`);
  } catch (e) {
    // A partial copy would hold what space a full disk has left; the next try has older copies fewer to make room.
    rmSync(`${path}.1`, { force: true });
    throw e;
  }
  const fd = openSync(path, "r+");
  try {
    ftruncateSync(fd, 0);
  } finally {
    closeSync(fd);
  }
  return true;
}
