/**
 * Rows go to D1 as JSON arrays, one bound value per statement, spread into columns by SQLite's
 * json_each: one bound value instead of one per column and row, which is most of what a D1
 * write costs. D1 holds at most 2 MB in one value, a bound one too, so the rows are cut into
 * arrays of a bounded size.
 */

/**
 * `texts` (each one JSON value) as JSON arrays of at most `max` by `size` (brackets and commas
 * counted), in order. A text larger than `max` alone gets an array of its own.
 */
export function jsonArrays(texts: Iterable<string>, max: number, size: (text: string) => number): string[] {
  const out: string[] = [];
  let parts: string[] = [];
  let total = 2;
  for (const text of texts) {
    const n = size(text) + 1;
    if (parts.length > 0 && total + n > max) {
      out.push(`[${parts.join(",")}]`);
      parts = [];
      total = 2;
    }
    parts.push(text);
    total += n;
  }
  if (parts.length > 0) out.push(`[${parts.join(",")}]`);
  return out;
}
