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

export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** The process group of a live process, from /proc (Linux). */
export function processGroupOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // Fields after the parenthesised command name: state, ppid, pgrp, ...
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(rest[2]);
}
