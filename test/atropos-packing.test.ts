import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { findGroupsSummingToTarget, grabExact, grabWithMinimumAllocations, type PackingEnv, type QueueIndex } from "../src/engine/atropos-packing";
import { refFindGroupsSummingToTarget, refGrabExact, refGrabWithMinimumAllocations, type RefItem } from "./support/atropos-reference";

/** The queue as the engine's tables index it, over a list; `reads` counts the groups read. */
class ListIndex implements QueueIndex {
  reads = 0;
  constructor(public items: RefItem[]) {}
  classes() {
    const m = new Map<string, { env: string; size: number; n: number }>();
    for (const it of this.items) {
      const env = it.env === null ? "none" : String(it.env);
      const k = `${env}/${it.size}`;
      const c = m.get(k) ?? { env, size: it.size, n: 0 };
      c.n++;
      m.set(k, c);
    }
    return [...m.values()];
  }
  read(size: number, env: string | undefined, after: number, limit: number) {
    const out = this.items
      .filter((it) => it.size === size && it.id > after && (env === undefined || (it.env === null ? "none" : String(it.env)) === env))
      .slice(0, limit)
      .map((it) => it.id);
    this.reads += out.length;
    return out;
  }
  take(ids: number[]) {
    const s = new Set(ids);
    this.items = this.items.filter((it) => !s.has(it.id));
  }
}

/** Every batch both cut from the same queue, until neither cuts one. */
function cutBoth(items: RefItem[], batchSize: number, envs: PackingEnv[] | null) {
  const ix = new ListIndex(items);
  let ref = items;
  const ours: number[][] = [];
  const theirs: number[][] = [];
  const refEnvs = (envs ?? []).map((e) => ({ registered_id: e.id, connected: e.connected, min_batch_allocation: e.min }));
  for (let round = 0; round < 200; round++) {
    const mine = envs === null ? grabExact(ix, batchSize) : grabWithMinimumAllocations(ix, batchSize, envs);
    const [batch, rest] = envs === null ? refGrabExact(ref, batchSize) : refGrabWithMinimumAllocations(ref, batchSize, refEnvs);
    if (mine !== null) ours.push(mine);
    if (batch !== null) theirs.push(batch.map((b) => b.id));
    if (mine === null || batch === null) break;
    ix.take(mine);
    ref = rest;
  }
  return { ours, theirs };
}

const pow2 = fc.constantFrom(1, 2, 4, 8);
const anySize = fc.integer({ min: 0, max: 9 });
const queueOf = (size: fc.Arbitrary<number>, envs: number) =>
  fc.array(fc.record({ size, env: fc.option(fc.integer({ min: 0, max: envs - 1 }), { nil: null, freq: 5 }) }), { maxLength: 80 }).map((xs) => xs.map((x, i) => ({ id: i + 1, ...x })));

describe("batch cutting agrees with Atropos's utils.py", () => {
  it("grab_exact_from_heterogeneous_queue: power-of-two groups, batch after batch", () => {
    fc.assert(
      fc.property(queueOf(pow2, 3), fc.constantFrom(4, 8, 16, 3, 6), (items, b) => {
        const { ours, theirs } = cutBoth(items, b, null);
        expect(ours).toEqual(theirs);
      }),
      { numRuns: 300 },
    );
  });

  it("grab_exact_from_heterogeneous_queue: any sizes, empty groups and batches smaller than a group included", () => {
    fc.assert(
      fc.property(queueOf(anySize, 3), fc.integer({ min: -1, max: 20 }), (items, b) => {
        const { ours, theirs } = cutBoth(items, b, null);
        expect(ours).toEqual(theirs);
      }),
      { numRuns: 300 },
    );
  });

  it("grab_batch_with_minimum_allocations, with connected and disconnected envs", () => {
    const env = (id: number) => fc.record({ id: fc.constant(id), connected: fc.boolean(), min: fc.option(fc.constantFrom(0.1, 0.25, 0.5, 0.75, 1), { nil: null }) });
    fc.assert(
      fc.property(queueOf(fc.oneof(pow2, anySize), 3), fc.constantFrom(4, 8, 16, 5), fc.tuple(env(0), env(1), env(2)), (items, b, envs) => {
        const { ours, theirs } = cutBoth(items, b, envs);
        expect(ours).toEqual(theirs);
      }),
      { numRuns: 400 },
    );
  });

  it("reads what a batch takes and a bounded look-ahead per size, not the queue of 20,000 groups", () => {
    const items: RefItem[] = Array.from({ length: 20_000 }, (_, i) => ({ id: i + 1, size: i % 2 === 0 ? 4 : 2, env: i % 3 }));
    const ix = new ListIndex(items);
    const batch = grabExact(ix, 16);
    expect(batch).toEqual(refGrabExact(items, 16)[0]!.map((x) => x.id));
    expect(ix.reads).toBeLessThanOrEqual(16 + 8);
    ix.reads = 0;
    const envs = [0, 1, 2].map((id) => ({ id, connected: true, min: 0.25 }));
    const withMin = grabWithMinimumAllocations(ix, 16, envs);
    expect(withMin).toEqual(refGrabWithMinimumAllocations(items, 16, envs.map((e) => ({ registered_id: e.id, connected: true, min_batch_allocation: e.min })))[0]!.map((x) => x.id));
    expect(ix.reads).toBeLessThan(600);
  });
});

describe("batches that take nothing", () => {
  it("are no batch: a batch_size of 0 cuts nothing, where Atropos cuts empty batches for ever", () => {
    const items: RefItem[] = [1, 2, 3].map((id) => ({ id, size: 2, env: 0 }));
    const envs = [{ id: 0, connected: true, min: 0.5 }];
    expect(refGrabWithMinimumAllocations(items, 0, [{ registered_id: 0, connected: true, min_batch_allocation: 0.5 }])[0]).toEqual([]);
    expect(grabWithMinimumAllocations(new ListIndex(items), 0, envs)).toBeNull();
    expect(grabExact(new ListIndex(items), 0)).toBeNull();
  });
});

describe("find_groups_summing_to_target", () => {
  it("takes the first groups in order when they make the target", () => {
    expect(findGroupsSummingToTarget([2, 1, 5, 1], 4)).toEqual([0, 1, 3]);
  });
  it("falls back to any combination, earlier groups first", () => {
    expect(findGroupsSummingToTarget([3, 3, 2, 2], 4)).toEqual([2, 3]);
    expect(findGroupsSummingToTarget([5, 3], 4)).toEqual([]);
    expect(findGroupsSummingToTarget([], 4)).toEqual([]);
  });
  it("allocates nothing for a target no buffer reaches (an env's group_size stored before the bound)", () => {
    expect(findGroupsSummingToTarget([2, 3, 1], 2 ** 40)).toEqual([]);
  });
  it("agrees with Atropos's on any sizes and targets", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 9 }), { maxLength: 300 }), fc.integer({ min: -2, max: 40 }), (sizes, target) => {
        // Atropos's table raises for a negative target (its row is too short for dp[0][0]); here that is [].
        const want = target < 0 ? [] : refFindGroupsSummingToTarget(sizes, target);
        expect(findGroupsSummingToTarget(sizes, target)).toEqual(want);
      }),
      { numRuns: 500 },
    );
  });
});
