/**
 * The trainer's output file. The trainer writes to it directly (an O_APPEND file descriptor,
 * not a pipe through the agent), so a trainer survives the agent being killed: with a pipe,
 * its next write would hit a closed pipe and kill it. The price is how rotation works:
 * copy-then-truncate, like logrotate's copytruncate. Appends after the truncate land at the
 * new end of the file; lines written between the copy and the truncate can be lost, which is
 * acceptable for a log and is why rotation is checked only every few seconds.
 */
import { closeSync, copyFileSync, existsSync, ftruncateSync, openSync, renameSync, statSync, unlinkSync } from "node:fs";
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
    let size: number;
    try {
      size = statSync(this.path).size;
    } catch {
      return false;
    }
    if (size <= this.maxBytes) return false;
    const oldest = `${this.path}.${this.keep}`;
    if (existsSync(oldest)) unlinkSync(oldest);
    for (let i = this.keep - 1; i >= 1; i--) {
      const from = `${this.path}.${i}`;
      if (existsSync(from)) renameSync(from, `${this.path}.${i + 1}`);
    }
    copyFileSync(this.path, `${this.path}.1`);
    const fd = openSync(this.path, "r+");
    try {
      ftruncateSync(fd, 0);
    } finally {
      closeSync(fd);
    }
    return true;
  }

  /** The last `maxLines` lines of output (at most `maxBytes` bytes), for the engine's status detail. */
  tail(maxLines = 40, maxBytes = 8192): string {
    return tailFile(this.path, maxLines, maxBytes);
  }
}
