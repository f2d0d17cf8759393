/**
 * What the stores hold, and sizes counted as they store them: in bytes of UTF-8, not in
 * characters. Every record the exchange keeps lands in an engine's SQLite (its rows, outbox and
 * command queue) and most of them in D1 too. Cloudflare's limits (the D1 and Durable Objects
 * "Limits" pages of developers.cloudflare.com):
 *
 * - D1: 2,000,000 bytes per string, BLOB or table row; 100 bound parameters per statement;
 *   100,000 bytes of SQL text per statement (each statement of a batch counts alone); 1,000
 *   queries per invocation.
 * - SQLite-backed Durable Objects: 2 MB per string, BLOB or table row (and per key plus value of
 *   the KV API); 100 bound parameters; 100 KB of SQL text per statement.
 *
 * Miniflare enforces none of them, so a value over one is accepted locally and fails only when
 * deployed; an outbox row over D1's would be retried forever. Sizes are checked against these
 * before anything is written.
 */
import { z } from "zod";

export const D1_MAX_ROW_BYTES = 2_000_000;
export const D1_MAX_BOUND_PARAMETERS = 100;
export const D1_MAX_STATEMENT_BYTES = 100_000;
/** D1 queries one Worker (or Durable Object) invocation may make; each statement of a batch counts. */
export const D1_MAX_QUERIES_PER_INVOCATION = 1_000;
/** "2 MB", read as D1's 2,000,000 bytes: the smaller of its two readings. */
export const DO_MAX_ROW_BYTES = 2_000_000;
export const DO_MAX_BOUND_PARAMETERS = 100;
export const DO_MAX_STATEMENT_BYTES = 100_000;
/** "10 GB" of SQLite per Durable Object, read as 10,000,000,000 bytes: the smaller reading. At it, every write of the object fails. */
export const DO_MAX_DATABASE_BYTES = 10_000_000_000;

/**
 * The most one client-sized value may take as stored: 1,900,000 bytes. The 100,000 under both
 * stores' 2,000,000 are left for what its row or record holds beside it: ids, names, numbers
 * and JSON keys, each bounded by its schema to a few kilobytes.
 */
export const MAX_STORED_BYTES = Math.min(D1_MAX_ROW_BYTES, DO_MAX_ROW_BYTES) - 100_000;

/**
 * The exchange's request bodies, as sent (http/body.ts): a transfer limit, not a store's. The
 * gateway sizes its biggest call record to fit a batch of one under it.
 */
export const MAX_REQUEST_BODY_BYTES = 4 * 1024 * 1024;

/**
 * A media upload's body (`PUT <engine>/agent/media/<sha256>`): one screenshot as base64 (a 4K
 * one is 8 to 11 MB), under the relay's 16 MiB for the call that carried it. Read whole, hashed
 * and stored, it takes about four times itself of an isolate's 128 MB.
 */
export const MAX_MEDIA_UPLOAD_BODY_BYTES = 12 * 1024 * 1024;

/** Bytes of `s` in UTF-8, counted without encoding it. A lone surrogate counts as U+FFFD (3 bytes). */
export function utf8Bytes(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) {
      n += 1;
    } else if (c >= 0xd800 && c < 0xdc00 && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      // A surrogate pair: two units, four bytes.
      n += 2;
      i++;
    } else {
      n += 2;
    }
  }
  return n;
}

/** A process's last output in a report (a trainer's exit, a run's process), in bytes of UTF-8. */
export const MAX_LOG_TAIL_BYTES = 16_384;

/**
 * The end of `s` that is at most `max` bytes of UTF-8, cut between code points: a log's last
 * lines under a limit counted in bytes (textOfAtMost). Counted as utf8Bytes counts (a lone
 * surrogate as U+FFFD's 3 bytes): text decoded from bytes that were no UTF-8 is U+FFFD each,
 * three times the bytes it came from.
 */
export function utf8TailOf(s: string, max: number): string {
  if (s.length * 3 <= max) return s;
  let bytes = 0;
  let i = s.length;
  while (i > 0) {
    const c = s.charCodeAt(i - 1);
    const pair = (c & 0xfc00) === 0xdc00 && i >= 2 && (s.charCodeAt(i - 2) & 0xfc00) === 0xd800;
    const size = pair ? 4 : c < 0x80 ? 1 : c < 0x800 ? 2 : 3;
    if (bytes + size > max) break;
    bytes += size;
    i -= pair ? 2 : 1;
  }
  return s.slice(i);
}

/** Bytes of `value`'s JSON in UTF-8, as a body or a stored record holds it. */
export const jsonBytes = (value: unknown): number => utf8Bytes(JSON.stringify(value) ?? "");

/**
 * Bytes of `s` as a JSON string, quoted and escaped, as a record that embeds it holds it (the
 * engine's outbox and command rows are JSON). At most 6 per UTF-16 unit (`\u0001`) plus the quotes.
 */
export const jsonStringBytes = (s: string): number => jsonBytes(s);

/** The most bytes one UTF-16 unit of a string takes as a JSON string. */
export const MAX_JSON_BYTES_PER_UNIT = 6;

/** 1900000 -> "1,900,000 bytes". */
export const formatBytes = (n: number): string => `${String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",")} bytes`;

/** Why a stored value has a ceiling, for error details. */
export const STORES_HOLD = `D1 and Durable Object storage hold ${formatBytes(Math.min(D1_MAX_ROW_BYTES, DO_MAX_ROW_BYTES))} per row`;

/** Why `what`, taking `bytes` as stored, cannot be stored; null when it fits. */
export function storedTooLarge(what: string, bytes: number): string | null {
  if (bytes <= MAX_STORED_BYTES) return null;
  return `${what} is ${formatBytes(bytes)} as stored; the limit is ${formatBytes(MAX_STORED_BYTES)} (${STORES_HOLD})`;
}

/** storedTooLarge for a string the store keeps inside a JSON record; counted only when it could be too large. */
export function storedStringTooLarge(what: string, s: string): string | null {
  if (s.length * MAX_JSON_BYTES_PER_UNIT + 2 <= MAX_STORED_BYTES) return null;
  return storedTooLarge(what, jsonStringBytes(s));
}

/** storedTooLarge for a value the store keeps as its JSON text. */
export function storedJsonTooLarge(what: string, value: unknown): string | null {
  const text = JSON.stringify(value) ?? "";
  // Each UTF-16 unit is at most 3 bytes of UTF-8: short texts need no count.
  if (text.length * 3 <= MAX_STORED_BYTES) return null;
  return storedTooLarge(what, utf8Bytes(text));
}

/**
 * Marks a validation issue as a size over a limit: the Worker answers it 413 payload_too_large,
 * as it answers a body over its size, rather than 422.
 */
export const TOO_LARGE = { too_large: true } as const;

export const isTooLargeIssue = (issue: z.core.$ZodIssue): boolean => issue.code === "custom" && issue.params?.["too_large"] === true;

/**
 * A size limit a caller configures, in bytes: at least `min`, and at most MAX_STORED_BYTES, the
 * most one stored value may take. A value above that is a limit the stores cannot hold: refused
 * 413 like a value over its size, the detail naming the ceiling. The document still shows the
 * ceiling as the schema's maximum.
 */
export function storableByteLimit(min: number) {
  return z
    .number()
    .int()
    .min(min)
    .check((ctx) => {
      if (ctx.value <= MAX_STORED_BYTES) return;
      ctx.issues.push({ code: "custom", message: `must be at most ${formatBytes(MAX_STORED_BYTES)}, the most one stored value may take (${STORES_HOLD})`, input: ctx.value, params: TOO_LARGE });
    })
    .meta({ maximum: MAX_STORED_BYTES });
}

/** A string of at most `max` bytes of UTF-8: a size, as what it takes to send and to store. */
export function textOfAtMost(max: number) {
  return z
    .string()
    .check((ctx) => {
      if (ctx.value.length * 3 <= max) return;
      const n = utf8Bytes(ctx.value);
      if (n > max) ctx.issues.push({ code: "custom", message: `is ${formatBytes(n)} of UTF-8; the limit is ${formatBytes(max)}`, input: ctx.value, params: TOO_LARGE });
    })
    .meta({ description: `At most ${formatBytes(max)} of UTF-8.` });
}

/**
 * Whether `s` is well-formed UTF-16 (String.prototype.isWellFormed, ES2024): no lone surrogate.
 * A lone surrogate has no UTF-8 form, so a store writes it as U+FFFD and an id would come back
 * changed: ids are refused with one instead.
 */
export const isWellFormed = (s: string): boolean => !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(s);

/** An id: 1 to `max` characters of well-formed Unicode. */
export const idText = (max = 256) =>
  z
    .string()
    .min(1, "must not be empty")
    .max(max, `is longer than ${max} characters`)
    .refine(isWellFormed, "holds a lone surrogate, which has no UTF-8 form: it would be stored as U+FFFD");

/**
 * The first `n` UTF-16 units of `s`, one fewer when the `n`th is the first half of a surrogate
 * pair: a lone half has no UTF-8 form, and Python's encoders and tokenizers refuse it in what
 * the ledger exports. A lone surrogate `s` itself holds is left as it is.
 */
export function headOf(s: string, n: number): string;
export function headOf(s: string | null, n: number): string | null;
export function headOf(s: string | null, n: number): string | null {
  if (s === null || s.length <= n) return s;
  const end = n > 0 && (s.charCodeAt(n - 1) & 0xfc00) === 0xd800 && (s.charCodeAt(n) & 0xfc00) === 0xdc00 ? n - 1 : n;
  return s.slice(0, Math.max(0, end));
}
