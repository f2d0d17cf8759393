/**
 * A discrete-event simulation of asynchronous RL under a staleness bound, for
 * `npm run bench:staleness`: rollout workers with heavy-tailed durations feed a trainer that
 * consumes a fixed batch per weight version. Under `drop`, what lags more than max_staleness
 * when the trainer takes it is thrown away (the engine's drop at get_rollout_data); under
 * `pace`, new rollouts are held back by the engine's own rule (src/engine/pacing.ts, run here
 * as it is) and nothing is thrown away; `flag` discards nothing and holds nothing back, as the
 * lag an unchecked run reaches. Pure and seeded: the same settings give the same figures.
 */
import { paceAdmits } from "../../src/engine/pacing";

export type Policy = "drop" | "pace" | "flag";

export type SimSettings = {
  workers: number;
  /** Median rollout duration in seconds; durations are log-normal with this sigma. */
  medianSeconds: number;
  sigma: number;
  /** Rollouts the trainer consumes per weight version, and the seconds one training step takes. */
  batch: number;
  stepSeconds: number;
  maxStaleness: number;
  /** Rollouts begin until this time; then what was begun is finished, consumed or discarded. */
  horizonSeconds: number;
  /** A held-back worker asks again after this long (AgentJet's client: 2 s on "No available episodes"). */
  retrySeconds: number;
  seed: number;
};

export type SimResult = {
  policy: Policy;
  started: number;
  delivered: number;
  discarded: number;
  /** Held-back claims (pace), each a worker asking again later. */
  held_back: number;
  discarded_fraction: number;
  /** Lag in versions of each delivered rollout when consumed: counts by lag, and quantiles. */
  lag_histogram: number[];
  lag: { p50: number; p90: number; p99: number; max: number };
  /** Mean duration (s) of the rollouts delivered, of all begun, and their ratio (1 = no bias). */
  mean_duration_delivered: number;
  mean_duration_started: number;
  duration_bias: number;
  /** Share of delivered rollouts longer than 5x the median, against the share among all begun. */
  long_share_delivered: number;
  long_share_started: number;
  versions: number;
  /** Rollouts consumed per simulated hour until the horizon, and the workers' busy share. */
  delivered_per_hour: number;
  worker_busy: number;
};

/** mulberry32: a small seeded generator, so a run is repeatable. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function logNormal(rand: () => number, median: number, sigma: number): number {
  // Box-Muller; 1 - u keeps the logarithm finite.
  const z = Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
  return median * Math.exp(sigma * z);
}

type Rollout = { startVersion: number; duration: number };
type Event = { t: number; seq: number; kind: "try" | "finish" | "trained"; worker: number; rollout?: Rollout };

/** A binary heap of events by time, then by order of scheduling. */
class Events {
  private heap: Event[] = [];
  private seq = 0;
  push(e: Omit<Event, "seq">): void {
    const h = this.heap;
    h.push({ ...e, seq: this.seq++ });
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!before(h[i]!, h[p]!)) break;
      [h[i], h[p]] = [h[p]!, h[i]!];
      i = p;
    }
  }
  pop(): Event | undefined {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (h.length > 0 && last !== undefined) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && before(h[l]!, h[m]!)) m = l;
        if (r < h.length && before(h[r]!, h[m]!)) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m]!, h[i]!];
        i = m;
      }
    }
    return top;
  }
}
const before = (a: Event, b: Event) => a.t < b.t || (a.t === b.t && a.seq < b.seq);

const quantile = (sorted: number[], q: number): number => (sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!);

export function simulate(policy: Policy, s: SimSettings): SimResult {
  const rand = rng(s.seed);
  const events = new Events();
  let version = 0;
  let training = false;
  /** Finished rollouts waiting for the trainer, in the order they finished. */
  const ready: Rollout[] = [];
  let readyHead = 0;
  /** Start versions of the rollouts under way or waiting, counted per version: the oldest is the smallest key. */
  const outstanding = new Map<number, number>();
  let underWayCount = 0;
  let batchTaken = 0;
  const started: Rollout[] = [];
  const delivered: { rollout: Rollout; lag: number }[] = [];
  let discarded = 0;
  let heldBack = 0;
  let busySeconds = 0;
  let deliveredByHorizon = 0;

  const oldestOutstanding = (): number | null => {
    let oldest: number | null = null;
    for (const v of outstanding.keys()) oldest = oldest === null ? v : Math.min(oldest, v);
    return oldest;
  };
  const count = (v: number, by: number) => {
    const n = (outstanding.get(v) ?? 0) + by;
    if (n === 0) outstanding.delete(v);
    else outstanding.set(v, n);
  };

  const tryTrain = (t: number): void => {
    if (training) return;
    const draining = t >= s.horizonSeconds && underWayCount === 0;
    while (readyHead < ready.length && batchTaken < s.batch) {
      const r = ready[readyHead++]!;
      count(r.startVersion, -1);
      const lag = version - r.startVersion;
      if (policy === "drop" && lag > s.maxStaleness) {
        discarded++;
        continue;
      }
      delivered.push({ rollout: r, lag });
      if (t <= s.horizonSeconds) deliveredByHorizon++;
      batchTaken++;
    }
    if (batchTaken === s.batch || (draining && batchTaken > 0)) {
      training = true;
      batchTaken = 0;
      events.push({ t: t + s.stepSeconds, kind: "trained", worker: -1 });
    }
  };

  for (let w = 0; w < s.workers; w++) events.push({ t: rand() * s.retrySeconds, kind: "try", worker: w });
  for (let e = events.pop(); e !== undefined; e = events.pop()) {
    if (e.kind === "try") {
      if (e.t >= s.horizonSeconds) continue;
      if (policy === "pace") {
        const admits = paceAdmits({
          consumerVersion: version,
          maxStaleness: s.maxStaleness,
          oldestVersion: oldestOutstanding(),
          outstanding: underWayCount + (ready.length - readyHead),
          // A batch being trained on was taken whole at this version.
          consumedAtVersion: training ? s.batch : batchTaken,
          perVersion: s.batch,
        });
        if (!admits) {
          heldBack++;
          events.push({ t: e.t + s.retrySeconds, kind: "try", worker: e.worker });
          continue;
        }
      }
      const r: Rollout = { startVersion: version, duration: logNormal(rand, s.medianSeconds, s.sigma) };
      started.push(r);
      count(r.startVersion, 1);
      underWayCount++;
      busySeconds += Math.min(r.duration, Math.max(0, s.horizonSeconds - e.t));
      events.push({ t: e.t + r.duration, kind: "finish", worker: e.worker, rollout: r });
    } else if (e.kind === "finish") {
      const r = e.rollout!;
      underWayCount--;
      ready.push(r);
      // The worker begins its next rollout at once (or is held back and asks again).
      events.push({ t: e.t, kind: "try", worker: e.worker });
      tryTrain(e.t);
    } else {
      training = false;
      version++;
      tryTrain(e.t);
    }
  }

  const lags = delivered.map((d) => d.lag).sort((a, b) => a - b);
  const histogram: number[] = [];
  for (const l of lags) histogram[l] = (histogram[l] ?? 0) + 1;
  const mean = (xs: number[]) => (xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length);
  const deliveredDurations = delivered.map((d) => d.rollout.duration);
  const startedDurations = started.map((r) => r.duration);
  const long = (xs: number[]) => (xs.length === 0 ? 0 : xs.filter((d) => d > 5 * s.medianSeconds).length / xs.length);
  const round = (x: number, digits = 4) => Number(x.toFixed(digits));
  return {
    policy,
    started: started.length,
    delivered: delivered.length,
    discarded,
    held_back: heldBack,
    discarded_fraction: round(started.length === 0 ? 0 : discarded / started.length),
    lag_histogram: Array.from(histogram, (n) => n ?? 0),
    lag: { p50: quantile(lags, 0.5), p90: quantile(lags, 0.9), p99: quantile(lags, 0.99), max: lags.at(-1) ?? 0 },
    mean_duration_delivered: round(mean(deliveredDurations), 1),
    mean_duration_started: round(mean(startedDurations), 1),
    duration_bias: round(mean(startedDurations) === 0 ? 1 : mean(deliveredDurations) / mean(startedDurations)),
    long_share_delivered: round(long(deliveredDurations)),
    long_share_started: round(long(startedDurations)),
    versions: version,
    delivered_per_hour: Math.round(deliveredByHorizon / (s.horizonSeconds / 3600)),
    worker_busy: round(busySeconds / (s.workers * s.horizonSeconds), 3),
  };
}
