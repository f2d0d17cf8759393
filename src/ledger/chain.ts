/**
 * A list (or a text) that begins with part of another: the first `head` items of `base`, then
 * `own`. Each of a claim's calls continues an earlier one, so each call's conversation or prompt
 * built as its own array holds the claim's history once per call: memory quadratic in turns (200
 * turns of a 100k-token agent held 10M ids at once). As chains they hold each item once, and a
 * call's list is made whole only while it is written out.
 */
type Piece = string | readonly unknown[];

export type Chain<P extends Piece> = { readonly base: Chain<P> | null; readonly head: number; readonly own: P; readonly length: number };

export const chainOf = <P extends Piece>(own: P): Chain<P> => ({ base: null, head: 0, own, length: own.length });

/** The first `count` items of `base`, then `own`; null when `base` has fewer. */
export function chained<P extends Piece>(base: Chain<P>, count: number, own: P): Chain<P> | null {
  if (count > base.length) return null;
  return count === 0 ? chainOf(own) : { base, head: count, own, length: count + own.length };
}

/** The pieces the chain's first `n` items are made of, in order: how many of each piece's own. */
function piecesOf<P extends Piece>(c: Chain<P>, n: number): { own: P; take: number }[] {
  // From the end back (a chain is as deep as the claim is long, so not by recursion), then turned.
  const pieces: { own: P; take: number }[] = [];
  let want = Math.min(n, c.length);
  for (let cur: Chain<P> | null = c; cur !== null && want > 0; cur = cur.base) {
    if (want > cur.head) pieces.push({ own: cur.own, take: want - cur.head });
    want = Math.min(want, cur.head);
  }
  return pieces.reverse();
}

/** The first `n` items (all by default) as one array. */
export function itemsOf<T>(c: Chain<readonly T[]>, n = c.length): T[] {
  const out: T[] = [];
  for (const { own, take } of piecesOf(c, n)) for (let k = 0; k < take; k++) out.push(own[k] as T);
  return out;
}

/** The text whole. */
export const textOf = (c: Chain<string>): string =>
  piecesOf(c, c.length)
    .map(({ own, take }) => own.slice(0, take))
    .join("");

/**
 * Whether `c` begins with all of `base`. A chain made from `base` (every link down to it keeping
 * at least its length) does, told without making either whole; another is compared item by item.
 */
export function chainBeginsWith<T>(c: Chain<readonly T[]>, base: Chain<readonly T[]>, same: (a: T, b: T) => boolean): boolean {
  if (c.length < base.length) return false;
  let kept = c.length;
  for (let cur: Chain<readonly T[]> | null = c; cur !== null && kept >= base.length; cur = cur.base) {
    if (cur === base) return true;
    kept = Math.min(kept, cur.head);
  }
  const items = itemsOf(c, base.length);
  const prefix = itemsOf(base);
  for (let i = 0; i < prefix.length; i++) if (!same(items[i] as T, prefix[i] as T)) return false;
  return true;
}
