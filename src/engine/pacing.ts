/**
 * Pacing instead of discarding (staleness_policy: pace). A rollout's lag is the consumer's
 * weight version when it is consumed minus the version it began at. Dropping what lags too far
 * throws away finished work, and mostly the slow rollouts, which biases training toward easy
 * tasks (tinker-cookbook PR #822). Pacing bounds the lag at the other end: new work is held
 * back while the work already under way could be consumed too late.
 *
 * The bound: the consumer moves one version on per `perVersion` rollouts it takes, and has
 * taken `consumedAtVersion` at its current one already (a batch it is training on counts whole).
 * Before the oldest rollout under way is consumed it can take at most every other rollout
 * already under way or waiting, and whatever is begun from now on. With no new work begun, the
 * oldest is therefore consumed at a lag of at most (current - oldest) + floor((outstanding - 1
 * + consumedAtVersion) / perVersion). New work is admitted only while that stays within
 * max_staleness, so the bound holds for every rollout as long as the consumer takes perVersion
 * rollouts per version. Pure functions: they test alone
 * and the staleness benchmark (bench/staleness) runs exactly these.
 */

export type PaceState = {
  /** The consumer's weight version now; null before it said one (then nothing is held back). */
  consumerVersion: number | null;
  maxStaleness: number | null;
  /** The version the oldest rollout under way or waiting began at; null when there is none. */
  oldestVersion: number | null;
  /** Rollouts under way or waiting to be consumed: what the trainer has not consumed yet, as far as the engine can tell (buffer-pace.ts, episode-claims.ts). */
  outstanding: number;
  /** Rollouts the consumer has taken at its current version. */
  consumedAtVersion: number;
  /** Rollouts the consumer takes per weight version; null while unknown (then nothing is held back). */
  perVersion: number | null;
};

/** The worst lag at which any rollout under way would be consumed, were `adding` more begun now; null when it cannot be told. */
export function worstLag(s: PaceState, adding: number): number | null {
  if (s.consumerVersion === null || s.perVersion === null || s.perVersion <= 0) return null;
  const behind = s.oldestVersion === null ? 0 : Math.max(0, s.consumerVersion - s.oldestVersion);
  // A consumer that took more than perVersion at one version is about to move on all the same.
  const ahead = Math.max(0, s.outstanding + adding - 1 + Math.min(s.consumedAtVersion, s.perVersion));
  return behind + Math.floor(ahead / s.perVersion);
}

/** Whether `adding` more rollouts may begin now without any being consumed more than max_staleness versions late. */
export function paceAdmits(s: PaceState, adding = 1): boolean {
  if (s.maxStaleness === null) return true;
  const lag = worstLag(s, adding);
  return lag === null || lag <= s.maxStaleness;
}

/**
 * Whether `adding` rollouts begun together are let in although the bound refuses them. A batch
 * that breaks the bound even alone, into an empty buffer at a fresh version, would be refused
 * for ever, the trainer waiting on it and the worker sending it again; it is taken once nothing
 * else is under way or waiting, so the lag it adds is only its own.
 */
export function paceAdmitsAlone(s: PaceState, adding: number): boolean {
  return s.outstanding === 0 && !paceAdmits({ ...s, outstanding: 0, consumedAtVersion: 0, oldestVersion: null }, adding);
}

/** The oldest of two versions, either of which may be unknown. */
export function olderVersion(a: number | null, b: number | null): number | null {
  if (a === null) return b;
  return b === null ? a : Math.min(a, b);
}
