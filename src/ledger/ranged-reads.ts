/**
 * Reading calls' bodies out of the ledger's R2 objects: each object once, a range spanning the
 * calls wanted of it, a few objects at a time. The readers (read.ts) and the gathering
 * (compaction.ts) both read so; what they do with the bytes differs.
 */

/** Where a call's body is: its object, and its line's offset and length there. */
export type Placed = { call_id: string; body_key: string; body_offset: number; body_length: number };

/** `items` by `key`, each list in the items' order, the keys in the order they first came. */
export function groupBy<T>(items: Iterable<T>, key: (t: T) => string): Map<string, T[]> {
  const out = new Map<string, T[]>();
  for (const t of items) {
    const k = key(t);
    const list = out.get(k);
    if (list === undefined) out.set(k, [t]);
    else list.push(t);
  }
  return out;
}

/** Objects read at once: each read's bytes are held until `take` has its calls' bodies out of them. */
const READS_AT_ONCE = 4;

/**
 * Reads each object `calls` are in once, READS_AT_ONCE at a time (an object holds the calls of
 * every claim its gateway relayed within a second, so a read of a few claims' calls can span
 * most of it), and hands `take` its calls with the range read: its bytes (null when the object is
 * gone: retention, an operator), from offset `from`, `length` asked for.
 */
export async function readRanges<C extends Placed>(bucket: R2Bucket, calls: readonly C[], take: (calls: C[], bytes: Uint8Array | null, from: number, length: number) => void): Promise<void> {
  const objects = [...groupBy(calls, (c) => c.body_key)];
  await Promise.all(
    Array.from({ length: Math.min(READS_AT_ONCE, objects.length) }, async () => {
      for (let next = objects.pop(); next !== undefined; next = objects.pop()) {
        const [key, list] = next;
        const from = Math.min(...list.map((c) => c.body_offset));
        const length = Math.max(...list.map((c) => c.body_offset + c.body_length)) - from;
        const obj = await bucket.get(key, { range: { offset: from, length } });
        take(list, obj === null ? null : new Uint8Array(await obj.arrayBuffer()), from, length);
      }
    }),
  );
}
