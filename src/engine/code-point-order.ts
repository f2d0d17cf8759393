/**
 * Strings in code point order, as Python's sorted() and SQLite's BINARY collation of UTF-8 order
 * them: JavaScript's < compares UTF-16 units, which puts a character past U+FFFF (a surrogate
 * pair, D800-DFFF) before one of U+E000..U+FFFF. Shifting each unit so that the surrogates sort
 * above that range gives code point order.
 */
const unit = (u: number): number => (u >= 0xd800 && u <= 0xdfff ? u + 0x2000 : u >= 0xe000 ? u - 0x800 : u);

export function byCodePoint(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return unit(x) - unit(y);
  }
  return a.length - b.length;
}
