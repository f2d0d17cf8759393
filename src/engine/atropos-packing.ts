/**
 * Atropos's batch cutting (atroposlib/api/utils.py, v0.4.0), computed from an index of the queue
 * instead of a pass over it. Atropos reads every queued group per batch; here each batch reads
 * the groups it takes and a pack of look-ahead per group size, whatever the queue holds. The
 * batches are Atropos's own, group for group (test/atropos-packing.test.ts checks them against a
 * port of utils.py on random queues).
 *
 * How Atropos packs: with M the largest group in the queue, the groups of each size s are taken
 * M/s at a time, in queue order, into packs of M sequences; a pack is ready at the position of
 * its last group. A size that does not divide M never packs. A batch is groups taken pack after
 * pack, in the order packs became ready, until exactly batch_size sequences (a group that
 * overshoots fails the batch). So only counts per size (to know M and how many packs there
 * are) and each size's oldest groups (to read packs in order) are needed.
 */

/** The queue as the packer reads it. `env` is a group's env_id as text, or "none". */
export interface QueueIndex {
  /** Queued groups per (env, size), only those with n > 0. */
  classes(): readonly { env: string; size: number; n: number }[];
  /** Ids of up to `limit` queued groups of `size` (of `env`, or of every env when undefined) after id `after`, oldest first. */
  read(size: number, env: string | undefined, after: number, limit: number): number[];
}

/** The environments as the packer needs them: registered_id, connected, min_batch_allocation. */
export type PackingEnv = { id: number; connected: boolean; min: number | null };

/** Groups per pack for size `s` when the largest group is `max`, or null when that size never packs. */
export function packLength(s: number, max: number): number | null {
  if (s === 0) return max === 0 ? 1 : null;
  return max % s === 0 ? max / s : null;
}

type Taken = { id: number; size: number };

/**
 * One size class read pack by pack: its groups in packs of `k`, `packs` of them. `ready` is the
 * id of the current pack's last group, the position Atropos readies the pack at.
 */
class PackCursor {
  private after = 0;
  private left: number;
  pack: number[] = [];
  constructor(
    private readonly ix: QueueIndex,
    readonly size: number,
    private readonly env: string | undefined,
    private readonly k: number,
    packs: number,
  ) {
    this.left = packs;
  }
  /** Reads the next pack; false when there is none. */
  advance(): boolean {
    if (this.left === 0) return false;
    this.left--;
    this.pack = this.ix.read(this.size, this.env, this.after, this.k);
    this.after = this.pack[this.pack.length - 1] ?? this.after;
    return this.pack.length === this.k;
  }
  get ready(): number {
    return this.pack[this.pack.length - 1] ?? Number.POSITIVE_INFINITY;
  }
}

/** The cursors' groups, pack by pack, in the order their packs became ready. */
function* packsInReadyOrder(cursors: PackCursor[]): Generator<Taken> {
  const live = cursors.filter((c) => c.advance());
  while (live.length > 0) {
    let at = 0;
    for (let i = 1; i < live.length; i++) if (live[i]!.ready < live[at]!.ready) at = i;
    const c = live[at]!;
    for (const id of c.pack) yield { id, size: c.size };
    if (!c.advance()) live.splice(at, 1);
  }
}

function sizesOf(ix: QueueIndex): Map<number, number> {
  const bySize = new Map<number, number>();
  for (const c of ix.classes()) bySize.set(c.size, (bySize.get(c.size) ?? 0) + c.n);
  return bySize;
}

const maxSize = (sizes: Iterable<number>): number => {
  let m = 0;
  for (const s of sizes) if (s > m) m = s;
  return m;
};

/** grab_exact_from_heterogeneous_queue: the ids of one batch, in Atropos's order, or null. */
export function grabExact(ix: QueueIndex, batchSize: number): number[] | null {
  const bySize = sizesOf(ix);
  if (bySize.size === 0) return null;
  let total = 0;
  for (const [s, n] of bySize) total += s * n;
  if (total < batchSize) return null;
  const max = maxSize(bySize.keys());
  const cursors: PackCursor[] = [];
  let packed = 0;
  for (const [s, n] of bySize) {
    const k = packLength(s, max);
    if (k === null || n < k) continue;
    const packs = Math.floor(n / k);
    packed += packs * k * s;
    cursors.push(new PackCursor(ix, s, undefined, k, packs));
  }
  if (packed < batchSize) return null;
  const batch: number[] = [];
  let running = 0;
  for (const g of packsInReadyOrder(cursors)) {
    batch.push(g.id);
    running += g.size;
    if (running === batchSize) return batch;
    if (running > batchSize) return null;
  }
  return null;
}

type EnvClass = { size: number; n: number; k: number; packs: number };

/** grab_batch_with_minimum_allocations: the ids of one batch, in Atropos's order, or null. */
export function grabWithMinimumAllocations(ix: QueueIndex, batchSize: number, envs: readonly PackingEnv[]): number[] | null {
  const classes = ix.classes();
  if (classes.length === 0) return null;
  const minimums = new Map<string, number>();
  for (const e of envs) if (e.connected && e.min !== null) minimums.set(String(e.id), e.min);
  if (minimums.size === 0) return grabExact(ix, batchSize);
  const max = maxSize(classes.map((c) => c.size));
  // Groups with no env_id are never packed on this path, as in Atropos.
  const byEnv = new Map<string, EnvClass[]>();
  for (const c of classes) {
    if (c.env === "none") continue;
    const k = packLength(c.size, max);
    const packs = k === null ? 0 : Math.floor(c.n / k);
    let list = byEnv.get(c.env);
    if (list === undefined) byEnv.set(c.env, (list = []));
    list.push({ size: c.size, n: c.n, k: k ?? 0, packs });
  }
  const packable = (env: string): EnvClass[] => (byEnv.get(env) ?? []).filter((c) => c.packs > 0);

  const wanted = new Map<string, number>();
  let totalMin = 0;
  for (const [env, share] of minimums) {
    const min = Math.trunc(batchSize * share);
    if (min <= 0) continue;
    // An env with a minimum and nothing packable queued holds every batch back (reported as a stall: atropos-stalls.ts).
    if (!byEnv.has(env) || packable(env).length === 0) return null;
    wanted.set(env, min);
    totalMin += min;
  }
  if (totalMin > batchSize) {
    const scale = batchSize / totalMin;
    for (const [env, min] of wanted) {
      const smallest = Math.min(...packable(env).map((c) => c.size));
      wanted.set(env, Math.max(smallest, Math.trunc(min * scale)));
    }
  }

  const batch: number[] = [];
  const taken = new Set<number>();
  let total = 0;
  for (const [env, min] of wanted) {
    let got = 0;
    // A size that no longer fits never will (the total only grows): its groups are skipped unread.
    const tooBig = new Set<number>();
    const cursors = packable(env).map((c) => new PackCursor(ix, c.size, env, c.k, c.packs));
    for (const g of packsInReadyOrder(cursors)) {
      if (got >= min) break;
      if (tooBig.has(g.size)) continue;
      if (total + g.size <= batchSize) {
        batch.push(g.id);
        taken.add(g.id);
        got += g.size;
        total += g.size;
      } else {
        tooBig.add(g.size);
        if (tooBig.size === cursors.length) break;
      }
    }
  }
  if (total < batchSize) {
    const streams: QueueStream[] = [];
    for (const [env, list] of byEnv) for (const c of list) if (c.packs > 0) streams.push(new QueueStream(ix, c.size, env, c.packs * c.k));
    for (const g of inQueueOrder(streams, (s) => total + s.size > batchSize)) {
      if (taken.has(g.id)) continue;
      batch.push(g.id);
      total += g.size;
      if (total === batchSize) break;
    }
  }
  // Atropos returns [] for a batch_size of 0, and its /batch loop (as cutAll) cuts empty batches
  // for ever: here that would hold the engine's object, which serves all its other work too.
  return total === batchSize && batch.length > 0 ? batch : null;
}

/** The first `count` groups of one (env, size) class, read a chunk at a time. */
class QueueStream {
  private buf: number[] = [];
  private at = 0;
  private after = 0;
  constructor(
    private readonly ix: QueueIndex,
    readonly size: number,
    private readonly env: string,
    private left: number,
  ) {}
  head(): number | null {
    if (this.at < this.buf.length) return this.buf[this.at]!;
    if (this.left === 0) return null;
    this.buf = this.ix.read(this.size, this.env, this.after, Math.min(this.left, 64));
    this.at = 0;
    this.left = this.buf.length === 0 ? 0 : this.left - this.buf.length;
    this.after = this.buf[this.buf.length - 1] ?? this.after;
    return this.buf[0] ?? null;
  }
  pop(): void {
    this.at++;
  }
}

/** The streams' groups merged in queue order; a stream is dropped once `done` says its size no longer fits. */
function* inQueueOrder(streams: QueueStream[], done: (s: QueueStream) => boolean): Generator<Taken> {
  const live = [...streams];
  for (;;) {
    let best = -1;
    let bestId = Number.POSITIVE_INFINITY;
    for (let i = live.length - 1; i >= 0; i--) {
      const s = live[i]!;
      const id = done(s) ? null : s.head();
      if (id === null) {
        live.splice(i, 1);
        if (best > i) best--;
        continue;
      }
      if (id < bestId) {
        bestId = id;
        best = i;
      }
    }
    if (best < 0) return;
    live[best]!.pop();
    yield { id: bestId, size: live[best]!.size };
  }
}

/**
 * find_groups_summing_to_target: indexes of buffered groups (sizes in arrival order) that make
 * exactly `target` sequences: the first that fit in order if they make it exactly, else any
 * combination, preferring earlier groups; [] if none does.
 */
export function findGroupsSummingToTarget(sizes: readonly number[], target: number): number[] {
  if (sizes.length === 0 || target < 0 || !reachable(sizes, target)) return [];
  let sum = 0;
  const fifo: number[] = [];
  for (let i = 0; i < sizes.length; i++) {
    const s = sizes[i]!;
    if (sum + s <= target) {
      fifo.push(i);
      sum += s;
      if (sum === target) return fifo;
    }
  }
  const first = firstReach(sizes, target);
  const n = sizes.length;
  if (first[target]! > n) return [];
  // Atropos's backtrack over dp[i - 1][j - s], which is first[j - s] <= i - 1.
  const out: number[] = [];
  let j = target;
  for (let i = n; i > 0; i--) {
    const s = sizes[i - 1]!;
    if (j >= s && first[j - s]! <= i - 1) {
      out.push(i - 1);
      j -= s;
    }
  }
  return out.sort((a, b) => a - b);
}

/** The greatest common divisor; gcd(0, s) is s, so a reduce over sizes starts at 0. */
export const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));

/**
 * False when no combination of `sizes` can make `target`, as cheaply as that is proved: the
 * groups that fit hold fewer sequences than it, all of them, or their sizes are all multiples of
 * some g that does not divide it (a buffer of groups of 3 for a group size of 16, which grows
 * with every group sent and would cost a table each time). This also keeps a target no buffer
 * could reach (an env's group_size of 2**40, stored before it was bounded) from sizing the table.
 */
function reachable(sizes: readonly number[], target: number): boolean {
  let sum = 0;
  let g = 0;
  for (const s of sizes) {
    if (s > target) continue;
    sum += s;
    g = gcd(g, s);
  }
  return sum >= target && (target === 0 || (g !== 0 && target % g === 0));
}

/**
 * Atropos's table dp[i][j] (can j be made from the first i groups) in one row: first[j] is the
 * least i for which dp[i][j] holds (n + 1 when none does), since a sum made from the first i
 * groups is made from more. O(target) memory, of the narrowest integers that count to n + 1,
 * where Atropos's table is (n + 1) x (target + 1) booleans.
 */
function firstReach(sizes: readonly number[], target: number): Uint8Array | Uint16Array | Uint32Array {
  const n = sizes.length;
  const first = n < 0xff ? new Uint8Array(target + 1) : n < 0xffff ? new Uint16Array(target + 1) : new Uint32Array(target + 1);
  first.fill(n + 1);
  first[0] = 0;
  for (let i = 1; i <= n; i++) {
    const s = sizes[i - 1]!;
    // Downwards, so that first[j - s] is still the row before this group's.
    for (let j = target; j >= s; j--) if (first[j]! > i && first[j - s]! < i) first[j] = i;
  }
  return first;
}
