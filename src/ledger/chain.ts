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

/** The pieces the chain's items from `from` to `to` are made of, in order: each piece's own, from where to where. */
function piecesOf<P extends Piece>(c: Chain<P>, from: number, to: number): { own: P; start: number; end: number }[] {
  // From the end back (a chain is as deep as the claim is long, so not by recursion), then turned.
  // A link's own items are at [head, head + own.length) of the chain, for the items it keeps.
  const pieces: { own: P; start: number; end: number }[] = [];
  let want = Math.min(to, c.length);
  for (let cur: Chain<P> | null = c; cur !== null && want > from; cur = cur.base) {
    if (want > cur.head) pieces.push({ own: cur.own, start: Math.max(from, cur.head) - cur.head, end: want - cur.head });
    want = Math.min(want, cur.head);
  }
  return pieces.reverse();
}

/** The items from `from` (0 by default) to `to` (the end by default) as one array. */
export function itemsOf<T>(c: Chain<readonly T[]>, to = c.length, from = 0): T[] {
  const out: T[] = [];
  for (const { own, start, end } of piecesOf(c, from, to)) for (let k = start; k < end; k++) out.push(own[k] as T);
  return out;
}

/** The text whole. */
export const textOf = (c: Chain<string>): string =>
  piecesOf(c, 0, c.length)
    .map(({ own, start, end }) => own.slice(start, end))
    .join("");

/**
 * Whether `c` begins with all of `base`. A chain made from `base` keeps its first items as they
 * are (each link down to it keeping `kept` of them): only the rest of `base` is compared, none
 * when it kept all (a call that extends the one before). Another chain is compared item by item.
 */
export function chainBeginsWith<T>(c: Chain<readonly T[]>, base: Chain<readonly T[]>, same: (a: T, b: T) => boolean): boolean {
  if (c.length < base.length) return false;
  let kept = c.length;
  let from = 0;
  for (let cur: Chain<readonly T[]> | null = c; cur !== null && kept > 0; cur = cur.base) {
    if (cur === base) {
      from = Math.min(kept, base.length);
      break;
    }
    kept = Math.min(kept, cur.head);
  }
  const items = itemsOf(c, base.length, from);
  const prefix = itemsOf(base, base.length, from);
  for (let i = 0; i < prefix.length; i++) if (!same(items[i] as T, prefix[i] as T)) return false;
  return true;
}
