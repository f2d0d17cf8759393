/**
 * Runs a short-lived helper (the environment scanner, an environment's `process` mode) in its
 * own process group with a deadline from the agent's clock. At the deadline the whole group is
 * killed, so a module that hangs at import or a model that never answers cannot stall the agent.
 */
import { spawn } from "node:child_process";
import { childEnv } from "../child-env";
import type { Clock } from "../clock";
import { describeError } from "../log";
import { signalGroup } from "./process-group";

export type Finished = { code: number | null; signal: string | null; stdout: string; stderr: string; timedOut: boolean; spawnError: string | null };

const MAX_CAPTURE = 1 << 20;
/** How long the output may still come after the helper ended (its last writes, still in the pipes). */
const STREAMS_GRACE_MS = 1000;

export async function runWithDeadline(
  argv: readonly string[],
  opts: { cwd?: string | null; env?: Record<string, string>; deadlineMs: number; clock: Clock; stop?: AbortSignal },
): Promise<Finished> {
  const child = spawn(argv[0] as string, argv.slice(1), {
    cwd: opts.cwd ?? undefined,
    env: childEnv(opts.env),
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => {
    if (stdout.length < MAX_CAPTURE) stdout += d.toString("utf8");
  });
  child.stderr.on("data", (d: Buffer) => {
    if (stderr.length < MAX_CAPTURE) stderr += d.toString("utf8");
  });
  const spawned = await new Promise<Error | null>((resolve) => {
    child.once("spawn", () => resolve(null));
    child.once("error", (e) => resolve(e));
  });
  if (spawned !== null) return { code: null, signal: null, stdout, stderr, timedOut: false, spawnError: describeError(spawned) };
  // Its exit, not its pipes' close: a process it started in a session of its own (a server an
  // environment module starts at import) may hold the pipes for as long as it lives, out of
  // reach of the group's SIGKILL.
  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const closed = new Promise<void>((resolve) => child.once("close", () => resolve()));
  const giveUp = new AbortController();
  const stop = opts.stop ? AbortSignal.any([opts.stop, giveUp.signal]) : giveUp.signal;
  const deadline = opts.clock.sleep(opts.deadlineMs, stop).then(() => "deadline" as const);
  const first = await Promise.race([exited, deadline]);
  giveUp.abort();
  if (first === "deadline") signalGroup(child.pid as number, "SIGKILL");
  const e = first === "deadline" ? await exited : first;
  const drained = new AbortController();
  await Promise.race([closed, opts.clock.sleep(STREAMS_GRACE_MS, drained.signal)]);
  drained.abort();
  child.stdout.destroy();
  child.stderr.destroy();
  return { ...e, stdout, stderr, timedOut: first === "deadline", spawnError: null };
}
