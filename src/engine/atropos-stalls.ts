/**
 * What keeps groups from ever being taken (the `stalls` of /status and of the engine's views),
 * from counts alone: groups per (env, size) queued and buffered, held groups per size, and the
 * envs. /status is read often (environments poll it), so nothing here passes over the queue.
 * Each kind is a proof that some groups wait for ever as things stand, never a guess: a
 * report that may be wrong would teach operators to ignore them.
 */
import type { AtroposStall } from "../protocol/atropos";
import { gcd, packLength } from "./atropos-packing";
import type { AtroposEnv } from "./atropos-store";

type Counted = { env: string; size: number; n: number };

export type StallCounts = {
  batchSize: number;
  held: readonly { size: number; n: number }[];
  queued: readonly Counted[];
  buffered: readonly Counted[];
  /** The registered envs ([] before a trainer registers). */
  envs: readonly AtroposEnv[];
};

export function stallsOf(counts: StallCounts): AtroposStall[] {
  const c = asTheNextCutSees(counts);
  return [...largerThanBatch(c), ...neverPacked(c), ...stuckInBuffer(c), ...minimumUnmet(c), ...batchSizeUnreachable(c), ...noEnvId(c)];
}

/**
 * The queue as the next cut packs it: a queued group larger than the batch is set aside first
 * (holdLargerThan), never in a batch. Counted as queued, it would be the largest queued group
 * that every pack is sized by, and the stalls would say of groups the next /batch does take
 * that they wait for ever.
 */
function asTheNextCutSees(c: StallCounts): StallCounts {
  if (c.batchSize <= 0 || !c.queued.some((q) => q.size > c.batchSize)) return c;
  const held = new Map(c.held.map((h) => [h.size, h.n]));
  for (const q of c.queued) if (q.size > c.batchSize) held.set(q.size, (held.get(q.size) ?? 0) + q.n);
  return { ...c, queued: c.queued.filter((q) => q.size <= c.batchSize), held: [...held].map(([size, n]) => ({ size, n })) };
}

const groupsIn = (classes: readonly Counted[]): number => classes.reduce((a, c) => a + c.n, 0);
const maxSizeOf = (classes: readonly Counted[]): number => classes.reduce((m, c) => Math.max(m, c.size), 0);

function largerThanBatch({ held, batchSize }: StallCounts): AtroposStall[] {
  return held.map((h) => ({ kind: "larger_than_batch", groups: h.n, detail: `${h.n} group(s) of ${h.size} sequences are larger than the batch (${batchSize}): set aside, never in a batch` }));
}

function neverPacked({ queued }: StallCounts): AtroposStall[] {
  const max = maxSizeOf(queued);
  const never = new Map<number, number>();
  for (const c of queued) if (packLength(c.size, max) === null) never.set(c.size, (never.get(c.size) ?? 0) + c.n);
  return [...never].map(([size, n]) => ({
    kind: "never_packed",
    groups: n,
    detail: `${n} queued group(s) of ${size} sequences do not pack into the largest queued group (${max}): they wait until it is gone`,
  }));
}

/** A buffered class larger than its env's group size: no combination with others makes exactly one group. */
function isStuck(b: Counted, envs: readonly AtroposEnv[]): boolean {
  const env = envs.find((e) => String(e.env_id) === b.env);
  return env !== undefined && b.size > env.group_size;
}

function stuckInBuffer({ buffered, envs }: StallCounts): AtroposStall[] {
  const stuck = new Map<string, number>();
  for (const b of buffered) if (isStuck(b, envs)) stuck.set(b.env, (stuck.get(b.env) ?? 0) + b.n);
  return [...stuck].map(([env, n]) => ({
    kind: "stuck_in_buffer",
    groups: n,
    detail: `${n} buffered group(s) of env ${env} are larger than its group size: no combination of groups makes one`,
  }));
}

function minimumUnmet({ batchSize, queued, envs }: StallCounts): AtroposStall[] {
  const max = maxSizeOf(queued);
  const waiting = groupsIn(queued);
  if (waiting === 0) return [];
  const out: AtroposStall[] = [];
  for (const e of envs) {
    if (!e.connected || e.min_batch_allocation === null || Math.trunc(batchSize * e.min_batch_allocation) <= 0) continue;
    const packs = queued.some((c) => {
      const k = packLength(c.size, max);
      return c.env === String(e.env_id) && k !== null && c.n >= k;
    });
    if (packs) continue;
    out.push({ kind: "minimum_unmet", groups: waiting, detail: `env ${e.env_id} (${e.real_name}) has a min_batch_allocation but no full pack queued: no batch is cut until it sends groups` });
  }
  return out;
}

/**
 * Every batch is exactly batch_size sequences made of whole groups, so when the sizes that can
 * be in one (those queued, those buffered that may yet be queued, and connected envs' group
 * sizes: none above the batch) are all multiples of some g that does not divide batch_size, no
 * batch is ever cut (Atropos's packing returns None each time while the queue grows). Groups of
 * 4 with a batch of 6 are the common case. Only this much is proved from the counts: sizes whose
 * gcd divides the batch may still stall on the order their packs come in, which only reading the
 * queue would tell.
 */
function batchSizeUnreachable(c: StallCounts): AtroposStall[] {
  const b = c.batchSize;
  const waiting = groupsIn(c.queued);
  if (b <= 0 || waiting === 0) return [];
  const sizes = [
    ...c.queued.map((q) => q.size),
    ...c.buffered.filter((q) => !isStuck(q, c.envs)).map((q) => q.size),
    ...c.envs.filter((e) => e.connected).map((e) => e.group_size),
  ];
  const g = sizes.filter((s) => s > 0 && s <= b).reduce(gcd, 0);
  if (g === 0 || b % g === 0) return [];
  return [
    {
      kind: "batch_size_unreachable",
      groups: waiting,
      detail: `${waiting} queued group(s) wait: every group size queued, buffered or registered by a connected env is a multiple of ${g}, and the batch (${b}) is not, so no batch can be made of them; none is cut until groups of another size come`,
    },
  ];
}

/**
 * grab_batch_with_minimum_allocations packs only groups with an env_id, and it is the packing
 * whenever a connected env has a min_batch_allocation: groups sent with no env_id (a client that
 * never registered) wait for as long as that holds, however many come.
 */
function noEnvId({ queued, envs }: StallCounts): AtroposStall[] {
  const holders = envs.filter((e) => e.connected && e.min_batch_allocation !== null).map((e) => e.env_id);
  const n = groupsIn(queued.filter((q) => q.env === "none"));
  if (holders.length === 0 || n === 0) return [];
  return [
    {
      kind: "no_env_id",
      groups: n,
      detail: `${n} queued group(s) have no env_id: while an env has a min_batch_allocation (env ${holders.join(", ")}), batches take only groups of an env, as in Atropos; they wait until none has`,
    },
  ];
}
