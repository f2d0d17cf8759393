/**
 * A full disk, without a mount. RLIMIT_FSIZE (`prlimit --fsize`) on a child process: a write
 * that crosses the limit writes what fits, then fails (EFBIG), as a write on a disk that fills
 * up mid-write writes what fits and fails with ENOSPC. Raising the limit from inside the child
 * (`prlimit --pid`) is space coming back. And, for the agent in this process, a directory
 * planted where writePrivateAtomic puts its temporary file: the replace throws from the line an
 * ENOSPC throws from.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** Runs a TypeScript snippet (tsx) in a child whose files may not grow past `fsize` bytes; its stdout. */
export function runWithFileLimit(dir: string, fsize: number, code: string): string {
  const script = join(dir, `script-${Math.random().toString(36).slice(2)}.ts`);
  writeFileSync(script, code);
  const r = spawnSync("prlimit", [`--fsize=${fsize}:unlimited`, process.execPath, "--import", "tsx", script], { encoding: "utf8", timeout: 30_000 });
  if (r.status !== 0) throw new Error(`child failed (${r.status}): ${r.stderr}`);
  return r.stdout;
}

/** Makes every replace of `path` by this process fail, as a full disk would. */
export function unwritable(path: string): void {
  const blocker = `${path}.tmp-${process.pid}`;
  mkdirSync(blocker, { recursive: true });
  writeFileSync(join(blocker, "keep"), "");
}
