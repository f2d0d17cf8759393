/**
 * A run's processes each lead their own process group (spawned detached), so a signal reaches
 * everything a process started (data loaders, inference workers) and a process survives the
 * agent being killed; the agent then finds it again by its pid.
 */
import { closeSync, openSync, readSync, fstatSync } from "node:fs";

/** Whether any process of the group led by `pgid` is alive. */
export function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Signals every process in the group; false if none was left. */
export function signalGroup(pgid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false;
  }
}

/** The last `maxLines` lines of a log file (at most `maxBytes`), or "" if it cannot be read. */
export function tailFile(path: string, maxLines = 40, maxBytes = 8192): string {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch {
    return "";
  }
  try {
    const size = fstatSync(fd).size;
    const start = Math.max(0, size - maxBytes);
    const buf = Buffer.alloc(size - start);
    readSync(fd, buf, 0, buf.length, start);
    let text = buf.toString("utf8");
    // A cut at a byte offset may split a line: drop the partial first line.
    if (start > 0) text = text.slice(text.indexOf("\n") + 1);
    return text.replace(/\n+$/, "").split("\n").slice(-maxLines).join("\n");
  } finally {
    closeSync(fd);
  }
}
