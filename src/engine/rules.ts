/**
 * The engine's rules as plain functions: no storage, no runtime, so they test in isolation.
 */
import { isRolling, type EngineStatus } from "../protocol/status";
import type { SyncConfig } from "../protocol/sync";

/** AgentJet's SwarmClient parses these texts: "No available episodes to claim." means retry in 2 s. */
export const NO_EPISODES_CAUSE = "No available episodes to claim. Try again (maybe 1 minute) later.";

const ADVICE: Record<EngineStatus, string> = {
  "ENGINE.OFFLINE":
    "Please start the engine first. Please use one of the client to run `client.sync_train_config() + client.start_engine()` to start the engine.",
  "ENGINE.BOOTING": "Please wait until the engine is fully booted. Try again (maybe 1 minute) later.",
  "ENGINE.WEIGHT_SYNCING": "Engine is syncing weights. Try again (maybe 1 minute) later.",
  "ENGINE.WEIGHT_EXPORTING": "Engine is exporting weights (fsdp -> hf safetensor). Try again (maybe 1 minute) later.",
  "ENGINE.ROLLING_POST": "Engine is in post-rolling phase. Try again (maybe 1 minute) later.",
  "ENGINE.ROLLING": "",
};

/**
 * A claim that staleness_policy pace holds back: it begins with the text the client retries on
 * in 2 s, since the wait is short (until the trainer consumes what is waiting), and says why.
 */
export const PACED_CAUSE =
  "No available episodes to claim. Pacing: the rollouts under way would otherwise be consumed more than max_staleness weight versions late; try again shortly.";

/**
 * Whether claimed episodes live in this status: while rolling, as AgentJet has it, and through a
 * weight sync when the engine keeps its claims across syncs.
 */
export function claimsLive(status: EngineStatus, sync: SyncConfig): boolean {
  return isRolling(status) || (sync.keep_claims_across_sync && status === "ENGINE.WEIGHT_SYNCING");
}

/** The seed's fail_cause for a claim while the engine is not ROLLING, text for text. */
export function notReadyCause(status: EngineStatus): string {
  return `Engine not ready. Current status: [${status}]. ${ADVICE[status]}`;
}

/**
 * Welford's running mean and variance: one row update per reward, numerically stable. `n` counts
 * reward values, `episodes` the episodes they came from (a list reward holds several values).
 */
export type RewardAccumulator = { n: number; episodes: number; mean: number; m2: number; min: number; max: number };

/** min and max are meaningless while n is 0; they stay finite so the accumulator survives JSON. */
export const EMPTY_ACCUMULATOR: RewardAccumulator = { n: 0, episodes: 0, mean: 0, m2: 0, min: 0, max: 0 };

/** Folds in one episode's reward values. */
export function accumulate(acc: RewardAccumulator, values: readonly number[]): RewardAccumulator {
  let { n, mean, m2, min, max } = acc;
  for (const x of values) {
    n += 1;
    const delta = x - mean;
    mean += delta / n;
    m2 += delta * (x - mean);
    if (n === 1 || x < min) min = x;
    if (n === 1 || x > max) max = x;
  }
  return { n, episodes: acc.episodes + 1, mean, m2, min, max };
}

/** Population standard deviation, as numpy.std computes it in the seed. */
export function summarize(acc: RewardAccumulator): { count: number; episodes: number; mean: number; std: number; min: number; max: number } {
  return { count: acc.n, episodes: acc.episodes, mean: acc.mean, std: acc.n > 0 ? Math.sqrt(acc.m2 / acc.n) : 0, min: acc.min, max: acc.max };
}

/** A WorkflowOutput reward: a number, a list of numbers, or none. */
export function rewardValues(reward: number | number[] | null): number[] {
  if (reward === null) return [];
  return Array.isArray(reward) ? reward : [reward];
}

/** Mean of a reward for the trajectory record; null when there is none. */
export function scalarReward(reward: number | number[] | null): number | null {
  const v = rewardValues(reward);
  return v.length === 0 ? null : v.reduce((a, b) => a + b, 0) / v.length;
}

/** "12.3s", as the seed formats durations in running_episode_details. */
export const seconds = (s: number): string => `${s.toFixed(1)}s`;

/** Exponential backoff for retries, capped, in milliseconds. */
export function backoffMs(attempts: number, baseMs = 1000, capMs = 5 * 60_000): number {
  return Math.min(capMs, baseMs * 2 ** Math.min(20, Math.max(0, attempts - 1)));
}

/**
 * Whether a status update begins a new run of the engine's history, and why: the trainer
 * started (the engine leaves OFFLINE), booted again without stopping, went back to an earlier
 * global step (restarted outside the exchange), or reported a global step on an engine that had
 * rolled without one (a load generator, then a trainer). A weight sync that carries on at the
 * same step, or any later step, stays in its run. The status machine keeps a run that has
 * nothing in it yet rather than begin another.
 */
export function runBeginning(
  prev: { status: EngineStatus; globalStep: number | null },
  next: { engine_status: EngineStatus; global_step?: number | null | undefined },
): "trainer_started" | "trainer_booted" | "step_backwards" | "step_appeared" | null {
  if (prev.status === "ENGINE.OFFLINE" && next.engine_status !== "ENGINE.OFFLINE") return "trainer_started";
  if (next.engine_status === "ENGINE.BOOTING" && prev.status !== "ENGINE.BOOTING") return "trainer_booted";
  if (next.global_step === undefined || next.global_step === null) return null;
  if (prev.globalStep === null) return "step_appeared";
  if (next.global_step < prev.globalStep) return "step_backwards";
  return null;
}
