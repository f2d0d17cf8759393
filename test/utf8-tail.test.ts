/**
 * utf8TailOf (protocol/limits.ts): a log's end under a bound counted in bytes of UTF-8, as the
 * exchange counts a report's log tail (textOfAtMost), cut between code points.
 */
import { describe, expect, it } from "vitest";
import { utf8Bytes, utf8TailOf } from "../src/protocol/limits";

describe("utf8TailOf", () => {
  it("keeps the end that fits, counting each character's UTF-8 bytes, and never splits a surrogate pair", () => {
    expect(utf8TailOf("abcdef", 4)).toBe("cdef");
    expect(utf8TailOf("ab\u00e9\u00e9", 4)).toBe("\u00e9\u00e9");
    // Text decoded from bytes that were no UTF-8: each U+FFFD is 3 bytes.
    expect(utf8TailOf("\uFFFD".repeat(10), 10)).toBe("\uFFFD".repeat(3));
    // A pair is 4 bytes: with 5 allowed, "x" and the pair fit; with 3, only "x".
    expect(utf8TailOf("a\u{1F600}x", 5)).toBe("\u{1F600}x");
    expect(utf8TailOf("a\u{1F600}x", 3)).toBe("x");
    // A lone surrogate counts as U+FFFD, as utf8Bytes counts it.
    expect(utf8TailOf("ab\uD800", 3)).toBe("\uD800");
  });

  it("keeps every result within the bound as the exchange counts it", () => {
    const texts = ["\uFFFD".repeat(9000), "\u00e9".repeat(12_000), `${"\u{1F600}".repeat(5000)}x`, "plain ".repeat(5000)];
    for (const text of texts) {
      const tail = utf8TailOf(text, 16_384);
      expect(utf8Bytes(tail)).toBeLessThanOrEqual(16_384);
      expect(utf8Bytes(tail)).toBeGreaterThan(16_384 - 4);
      expect(text.endsWith(tail)).toBe(true);
    }
  });
});
