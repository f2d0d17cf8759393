import { readFileSync } from "node:fs";

/**
 * Waits for a condition in a real process or socket (which no injected clock can drive):
 * checks it every few milliseconds and fails with `what` after the deadline.
 */
export async function waitUntil<T>(check: () => T | undefined | null | false | Promise<T | undefined | null | false>, what: string, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== null && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Whether the process runs: a zombie (ended, not yet reaped by its parent or init) does not. */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
  return processState(pid) !== "Z";
}

/** The process group of a live process, from /proc (Linux). */
export function processGroupOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // Fields after the parenthesised command name: state, ppid, pgrp, ...
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(rest[2]);
}

/** A process's state letter from /proc (R, S, Z for a zombie...), or "gone". */
export function processState(pid: number): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0] ?? "";
  } catch {
    return "gone";
  }
}
