/**
 * What the agent writes on the GPU host is its owner's alone: directories 0700, files 0600. A GPU
 * host is often shared, and these hold what another user must not read: the synced train config
 * (upstream API keys), a run's config.yaml (the trainer token, in its Atropos URL), the logs.
 *
 * Modes are given where each directory and file is made, not by a umask: the trainer and run
 * processes would inherit a umask and write their own files (checkpoints others may need to
 * read) owner-only too, and a umask tightens nothing an older agent already made.
 */
import { chmodSync, closeSync, fchmodSync, fstatSync, mkdirSync, openSync, renameSync, statSync, unlinkSync, writeFileSync } from "node:fs";
import { describeError, type Logger } from "./log";

export const PRIVATE_DIR_MODE = 0o700;
export const PRIVATE_FILE_MODE = 0o600;

const OPEN_TO_OTHERS = 0o077;
const STICKY = 0o1000;

const octal = (mode: number): string => `0${(mode & 0o777).toString(8)}`;

/**
 * Makes `dir` and its missing parents 0700. One that exists open to the group or others (made by
 * an older agent, or by hand) is made 0700, and the log says so: once, since it stays so.
 */
export function privateDir(dir: string, logger?: Logger): void {
  mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
  const mode = statSync(dir).mode;
  if ((mode & OPEN_TO_OTHERS) === 0) return;
  // A sticky directory (/tmp) is everyone's by design: closing it would break the host, not protect the agent.
  if ((mode & STICKY) !== 0) {
    logger?.warn(`${dir} is shared (mode ${octal(mode)}, sticky): left as it is; give the agent a directory of its own, what it writes there is owner-only still`);
    return;
  }
  try {
    chmodSync(dir, PRIVATE_DIR_MODE);
  } catch (e) {
    logger?.warn(`could not make ${dir} owner-only (mode ${octal(mode)}): ${(e as Error).message}`);
    return;
  }
  logger?.info(`made ${dir} owner-only (mode ${octal(mode)} -> 0700): the agent's configs, logs and notes in it are for its own user`);
}

/**
 * Replaces `path` with `text` (mode 0600) through a temporary file and a rename. The temporary
 * file is created exclusively, so a symlink planted under its name is never followed.
 */
export function writePrivateAtomic(path: string, text: string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  let fd: number;
  try {
    fd = openSync(tmp, "wx", PRIVATE_FILE_MODE);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    // Left by a process of this pid that died mid-write (or planted): removing a link removes only the link.
    unlinkSync(tmp);
    fd = openSync(tmp, "wx", PRIVATE_FILE_MODE);
  }
  try {
    try {
      writeFileSync(fd, text);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
  } catch (e) {
    // On a full disk: a partial copy left behind holds space the disk lacks, and the next process (another pid) would never remove it.
    try {
      unlinkSync(tmp);
    } catch {
      // Gone already; the write's error is the one worth telling.
    }
    throw e;
  }
}

/**
 * writePrivateAtomic for a pid file: the note that lets an agent restarted after a crash adopt a
 * process, not a gate on starting it. A write the disk refuses is warned about (`what`: that the
 * process runs) and the process runs and is watched all the same: a throw would leave its start
 * unanswered, handed out again after each lease.
 */
export function notePid(path: string, text: string, what: string, logger: Logger): void {
  try {
    writePrivateAtomic(path, text);
  } catch (e) {
    logger.warn(`cannot write ${path} (${describeError(e)}): ${what}, but an agent restarted after a crash will not find it`);
  }
}

/** A file descriptor appending to `path`, created 0600; an existing file open to others (an older agent's) is made 0600. */
export function openPrivateAppend(path: string): number {
  const fd = openSync(path, "a", PRIVATE_FILE_MODE);
  try {
    if ((fstatSync(fd).mode & OPEN_TO_OTHERS) !== 0) fchmodSync(fd, PRIVATE_FILE_MODE);
  } catch (e) {
    closeSync(fd);
    throw e;
  }
  return fd;
}
