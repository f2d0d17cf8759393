/**
 * Atropos's atroposlib/api/utils.py (v0.4.0), ported line by line over a plain list: the
 * reference the exchange's indexed batch cutting (src/engine/atropos-packing.ts) must agree with.
 * A queue item is { id, size, env } (env null for a group with no env_id).
 */
export type RefItem = { id: number; size: number; env: number | null };
export type RefEnv = { registered_id: number; connected: boolean; min_batch_allocation: number | null };

export function refGrabExact(queue: RefItem[], batchSize: number): [RefItem[] | null, RefItem[]] {
  if (queue.length === 0) return [null, queue];
  const sizes = queue.map((q) => q.size);
  const total = sizes.reduce((a, b) => a + b, 0);
  const max = Math.max(0, ...sizes);
  if (total < batchSize) return [null, queue];
  const storage = new Map<number, number[]>();
  for (const s of new Set(sizes)) storage.set(s, []);
  const potential: number[] = [];
  sizes.forEach((s, i) => {
    const list = storage.get(s)!;
    list.push(i);
    if (list.length * s === max) {
      potential.push(...list);
      storage.set(s, []);
    }
  });
  if (potential.reduce((a, i) => a + sizes[i]!, 0) < batchSize) return [null, queue];
  const batch: RefItem[] = [];
  const idx = new Set<number>();
  let running = 0;
  for (const i of potential) {
    batch.push(queue[i]!);
    idx.add(i);
    running += sizes[i]!;
    if (running === batchSize) break;
    if (running > batchSize) return [null, queue];
  }
  if (running !== batchSize) return [null, queue];
  return [batch, queue.filter((_, i) => !idx.has(i))];
}

export function refGrabWithMinimumAllocations(queue: RefItem[], batchSize: number, envs: RefEnv[]): [RefItem[] | null, RefItem[]] {
  if (queue.length === 0) return [null, queue];
  const mins = new Map<number, number>();
  for (const e of envs) if (e.connected && e.min_batch_allocation !== null) mins.set(e.registered_id, e.min_batch_allocation);
  if (mins.size === 0) return refGrabExact(queue, batchSize);
  let max = 0;
  for (const q of queue) if (q.size > max) max = q.size;
  const itemsByEnv = new Map<number, Map<number, [number, RefItem, number][]>>();
  const packable = new Map<number, [number, RefItem, number][]>();
  queue.forEach((item, i) => {
    if (item.env === null) return;
    if (!itemsByEnv.has(item.env)) {
      itemsByEnv.set(item.env, new Map());
      packable.set(item.env, []);
    }
    const bySize = itemsByEnv.get(item.env)!;
    if (!bySize.has(item.size)) bySize.set(item.size, []);
    bySize.get(item.size)!.push([i, item, item.size]);
    const list = bySize.get(item.size)!;
    if (list.length * item.size === max) {
      packable.get(item.env)!.push(...list);
      bySize.set(item.size, []);
    }
  });
  const minSeqs = new Map<number, number>();
  let totalMin = 0;
  for (const [env, share] of mins) {
    const m = Math.trunc(batchSize * share);
    if (m > 0) {
      if (!itemsByEnv.has(env)) return [null, queue];
      if (!packable.has(env) || packable.get(env)!.length === 0) return [null, queue];
      minSeqs.set(env, m);
      totalMin += m;
    }
  }
  if (totalMin > batchSize) {
    const scale = batchSize / totalMin;
    for (const env of minSeqs.keys()) {
      const p = packable.get(env);
      if (p && p.length > 0) minSeqs.set(env, Math.max(Math.min(...p.map((g) => g[2])), Math.trunc(minSeqs.get(env)! * scale)));
    }
  }
  const batch: RefItem[] = [];
  const indices: number[] = [];
  const takenPer = new Map<number, number>();
  for (const env of packable.keys()) takenPer.set(env, 0);
  let total = 0;
  for (const [env, m] of minSeqs) {
    for (const [idx, item, size] of packable.get(env) ?? []) {
      if (takenPer.get(env)! >= m) break;
      if (total + size <= batchSize) {
        batch.push(item);
        indices.push(idx);
        takenPer.set(env, takenPer.get(env)! + size);
        total += size;
      }
    }
  }
  if (total < batchSize) {
    const all: [number, RefItem, number][] = [];
    queue.forEach((item, i) => {
      if (indices.includes(i)) return;
      if (item.env !== null && packable.has(item.env)) {
        const hit = packable.get(item.env)!.find((p) => p[0] === i);
        if (hit) all.push(hit);
      }
    });
    for (const [idx, item, size] of all) {
      if (total + size <= batchSize) {
        batch.push(item);
        indices.push(idx);
        total += size;
      }
      if (total === batchSize) break;
    }
  }
  if (total !== batchSize) return [null, queue];
  const set = new Set(indices);
  return [batch, queue.filter((_, i) => !set.has(i))];
}

/** find_groups_summing_to_target, its (n + 1) x (target + 1) table as it is: the indices of groups whose sizes make `target`. */
export function refFindGroupsSummingToTarget(sizes: number[], target: number): number[] {
  if (sizes.length === 0) return [];
  let sum = 0;
  const fifo: number[] = [];
  for (const [i, s] of sizes.entries()) {
    if (sum + s <= target) {
      fifo.push(i);
      sum += s;
      if (sum === target) return fifo;
    }
  }
  const n = sizes.length;
  const dp = Array.from({ length: n + 1 }, () => new Array<boolean>(target + 1).fill(false));
  dp[0]![0] = true;
  for (let i = 1; i <= n; i++) {
    for (let j = 0; j <= target; j++) dp[i]![j] = dp[i - 1]![j]! || (j >= sizes[i - 1]! && dp[i - 1]![j - sizes[i - 1]!]!);
  }
  if (!dp[n]![target]) return [];
  const out: number[] = [];
  let j = target;
  for (let i = n; i > 0; i--) {
    if (j >= sizes[i - 1]! && dp[i - 1]![j - sizes[i - 1]!]) {
      out.push(i - 1);
      j -= sizes[i - 1]!;
    }
  }
  return out.sort((a, b) => a - b);
}
