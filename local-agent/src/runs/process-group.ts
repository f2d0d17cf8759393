/**
 * A run's processes each lead their own process group (spawned detached), so a signal reaches
 * everything a process started (data loaders, inference workers) and a process survives the
 * agent being killed; the agent then finds it again by its pid.
 */
import { closeSync, fstatSync, openSync, readFileSync, readSync, readdirSync } from "node:fs";
import type { Clock } from "../clock";

/** Whether any process of the group led by `pgid` is alive. */
export function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
  // kill(-pgid, 0) also succeeds while the group holds only zombies: members that have ended
  // but that nobody has reaped yet (an orphan waits for init, which in a container may be slow
  // or never). They are dead, and must not make a clean stop look like an ignored SIGTERM.
  return !onlyZombies(pgid);
}

/** True when /proc shows the group's members all ended (zombies); false if it cannot tell. */
function onlyZombies(pgid: number): boolean {
  let names: string[];
  try {
    names = readdirSync("/proc");
  } catch {
    return false;
  }
  let members = 0;
  for (const name of names) {
    if (name.charCodeAt(0) < 48 || name.charCodeAt(0) > 57) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${name}/stat`, "utf8");
    } catch {
      continue; // ended meanwhile
    }
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so read after the last ")".
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (Number(fields[2]) !== pgid) continue;
    members++;
    if (fields[0] !== "Z" && fields[0] !== "X") return false;
  }
  return members > 0;
}

/**
 * /proc's clock ticks per second (USER_HZ). Node cannot ask sysconf(_SC_CLK_TCK); the kernel
 * fixes USER_HZ at 100 for userspace on every architecture Node runs on.
 */
const CLOCK_TICKS_PER_SECOND = 100;

/**
 * How far a process's start as /proc tells it may be from the start a note recorded and still be
 * the same process: the boot time is whole seconds, a clock step since moves it, and an older
 * note holds the wall-clock time taken just after the spawn. A reused pid starts later by far:
 * after a reboot, or after the pid numbers came round again.
 */
export const START_TOLERANCE_MS = 5000;

/** The boot time in ms since the epoch (/proc/stat's btime), or null without /proc. */
function bootTime(): number | null {
  try {
    const m = /^btime (\d+)$/m.exec(readFileSync("/proc/stat", "utf8"));
    return m === null ? null : Number(m[1]) * 1000;
  } catch {
    return null;
  }
}

/**
 * When process `pid` started, in ms since the epoch: /proc/<pid>/stat's starttime (field 22,
 * clock ticks since boot) after /proc/stat's btime. "gone" when no such process exists; null
 * where /proc cannot tell (not Linux, or no /proc mounted).
 */
export function processStartedAt(pid: number): number | "gone" | null {
  const boot = bootTime();
  if (boot === null) return null;
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "ENOENT" ? "gone" : null;
  }
  // Fields after the last ")" start at field 3 (state): field 22 is the 20th of them.
  const ticks = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]);
  return Number.isFinite(ticks) ? boot + (ticks * 1000) / CLOCK_TICKS_PER_SECOND : null;
}

/** What a note recorded of a process: a start from processStartedAt, or a wall-clock time taken just after the spawn. */
export type NotedStart = number | null;

/**
 * The start to check a noted pid against: the /proc start the note recorded, else the wall-clock
 * time just after the spawn (all that older agents' notes, and the exchange, hold), else null.
 * Notes are read from disk as JSON, so a field is taken only if it holds a number.
 */
export function notedStart(procStartedAt: number | undefined, spawnedAt: number | null = null): NotedStart {
  return typeof procStartedAt === "number" ? procStartedAt : typeof spawnedAt === "number" ? spawnedAt : null;
}

/**
 * Whether the process group led by `pgid` is still the one a note recorded as started at
 * `startedAt`: a pid in an old note may name an unrelated process now (after a reboot, or once
 * the pid numbers came round), which the agent must neither adopt nor signal.
 *
 * Where /proc cannot tell (not Linux), and for a note that recorded no start (written by an agent
 * that kept none), the group is taken as ours whenever it is alive: the pid alone, as before.
 */
export function isOurGroup(pgid: number, startedAt: NotedStart): boolean {
  if (!groupAlive(pgid)) return false;
  if (startedAt === null) return true;
  const started = processStartedAt(pgid);
  if (started === null) return true;
  if (started !== "gone") return Math.abs(started - startedAt) <= START_TOLERANCE_MS;
  // The leader is gone and left members in its group. Its pid number stays taken while the group
  // has members, so the group is the noted one unless the host rebooted since the note (within
  // one boot only the group ending, the pid coming round and a new leader dying leaving members
  // would fool this).
  const boot = bootTime();
  return boot === null || startedAt >= boot - START_TOLERANCE_MS;
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

export type GroupStopOptions = {
  graceMs: number;
  clock: Clock;
  pollMs: number;
  /**
   * Whether the group's leader has been reaped, for a leader that is our child: its exit event
   * comes after the group is gone, and what it reports (code, signal) is read from it.
   */
  leaderReaped?: () => boolean | Promise<boolean>;
  /** Called at each poll while the grace period runs, with the time waited so far. */
  onWait?: (waitedMs: number) => void;
  /** Called once, just before SIGKILL. */
  onKill?: () => void;
};

/**
 * SIGTERM to the whole group, SIGKILL once `graceMs` has passed; resolves when every process of
 * the group is gone (helpers too: they may hold GPUs or ports), telling whether SIGKILL was sent.
 */
export async function stopGroup(pgid: number, o: GroupStopOptions): Promise<{ killed: boolean }> {
  signalGroup(pgid, "SIGTERM");
  const start = o.clock.now();
  let killed = false;
  while (groupAlive(pgid) || (o.leaderReaped !== undefined && !(await o.leaderReaped()))) {
    const waited = o.clock.now() - start;
    if (!killed && waited >= o.graceMs) {
      o.onKill?.();
      signalGroup(pgid, "SIGKILL");
      killed = true;
    } else if (!killed) o.onWait?.(waited);
    await o.clock.sleep(o.pollMs);
  }
  return { killed };
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
