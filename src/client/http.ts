import type { z } from "zod";
import { ErrorResponse } from "../protocol/admin";

export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

/** `?a=1&b=x` from the defined entries, or "" when there are none. */
export function queryString(q: Record<string, string | number | undefined>): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined) params.set(k, String(v));
  const qs = params.toString();
  return qs ? `?${qs}` : "";
}

/**
 * A name as one segment of a URL's path. `.` and `..` cannot be one: a URL parser takes them,
 * escaped too, for dot-segments and drops them, so the request would go to another route
 * (`revokeToken(engine, "..")` to DELETE the engine's own URL). Refused before any request.
 */
export function pathSegment(what: string, name: string): string {
  if (name === "." || name === "..") throw new RangeError(`${what} ${JSON.stringify(name)} is '.' or '..', which URLs read as a dot-segment: no URL can name it`);
  return encodeURIComponent(name);
}

/** The code of an ExchangeError for a 2xx answer that does not fit its schema (unreadableAnswer). */
export const UNREADABLE_ANSWER = "unreadable_answer";

/** A non-2xx answer from the exchange (or a 2xx one this client cannot read: UNREADABLE_ANSWER), with its status, error code and human-readable detail. */
export class ExchangeError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly detail: string,
    /** The answer's Retry-After in seconds (a 429 or 503 says when to come back), else null. */
    readonly retryAfterSeconds: number | null = null,
  ) {
    super(`${status} ${code}: ${detail}`);
    this.name = "ExchangeError";
  }
}

/** Builds the error for a non-2xx JSON answer, for callers that keep more than code and detail; null falls back to the default. */
type RefusalReader = (status: number, json: unknown, retryAfterSeconds: number | null) => ExchangeError | null;

/**
 * JSON.stringify's replacer that refuses NaN and ±Infinity, which it would write as null: a
 * learning rate of 0/0 locked as null, a reward of NaN sent as none. Refused before any request;
 * the exchange's schemas take finite numbers only.
 */
function finiteOnly(this: unknown, key: string, value: unknown): unknown {
  if (typeof value === "number" && !Number.isFinite(value)) {
    throw new RangeError(`${key === "" ? "the request" : JSON.stringify(key)} is ${value}, which JSON cannot carry: send a finite number`);
  }
  return value;
}

/** Sends one JSON request and validates the answer against `schema`. */
export async function requestJson<S extends z.ZodType>(
  fetchFn: FetchLike,
  url: string,
  schema: S,
  init: {
    method: "GET" | "POST" | "PUT" | "DELETE";
    body?: unknown;
    token?: string | undefined;
    signal?: AbortSignal | undefined;
    refusal?: RefusalReader;
  },
): Promise<z.output<S>> {
  const headers: Record<string, string> = {};
  if (init.body !== undefined) headers["content-type"] = "application/json";
  if (init.token !== undefined) headers["authorization"] = `Bearer ${init.token}`;
  const res = await fetchFn(url, {
    method: init.method,
    headers,
    body: init.body === undefined ? null : JSON.stringify(init.body, finiteOnly),
    ...(init.signal ? { signal: init.signal } : {}),
  });
  return jsonAnswer(res, await res.text(), schema, url, init.refusal);
}

/** `text`, the body of `res` from `url`: read with `schema` when a 2xx, else thrown as the ExchangeError it says. */
export function jsonAnswer<S extends z.ZodType>(
  res: { status: number; ok: boolean; headers: { get(name: string): string | null } },
  text: string,
  schema: S,
  url: string,
  refusal?: RefusalReader,
): z.output<S> {
  // A proxy's or the edge's own page (an HTML 503) may say when to come back too.
  const retryAfter = res.ok ? null : retryAfterSeconds(res.headers.get("retry-after"));
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new ExchangeError(res.status, "bad_response", `expected JSON from ${shownUrl(url)}, got: ${text.slice(0, 200)}`, retryAfter);
  }
  if (!res.ok) {
    const custom = refusal?.(res.status, json, retryAfter);
    if (custom) throw custom;
    const err = ErrorResponse.safeParse(json);
    throw err.success ? new ExchangeError(res.status, err.data.error, err.data.detail, retryAfter) : new ExchangeError(res.status, "http_error", text.slice(0, 500), retryAfter);
  }
  return readAnswer(schema, json, res.status, url);
}

/** `json`, a 2xx answer from `url`, read with `schema`: an ExchangeError UNREADABLE_ANSWER when it does not fit. */
export function readAnswer<S extends z.ZodType>(schema: S, json: unknown, status: number, url: string): z.output<S> {
  const read = schema.safeParse(json);
  if (!read.success) throw unreadableAnswer(status, url, read.error);
  return read.data;
}

/** Field paths named in an unreadable answer's detail at most: the first say where, the rest would only lengthen it. */
const MAX_PATHS_NAMED = 5;

/**
 * A 2xx answer this client cannot read: the exchange did what was asked, so this is no error to
 * retry (the same answer comes back), and callers that catch ExchangeError catch it. The detail
 * names the fields, never their values, which may hold what the caller should not log.
 */
function unreadableAnswer(status: number, url: string, error: z.ZodError): ExchangeError {
  const paths = [...new Set(error.issues.map((i) => (i.path.length === 0 ? "(the answer)" : i.path.map(String).join("."))))];
  const named = paths.slice(0, MAX_PATHS_NAMED).join(", ") + (paths.length > MAX_PATHS_NAMED ? ` and ${paths.length - MAX_PATHS_NAMED} more` : "");
  return new ExchangeError(
    status,
    UNREADABLE_ANSWER,
    `the answer from ${shownUrl(url)} does not have the shape this client reads (${named}): an exchange newer than this client may need a newer client or agent`,
  );
}

/**
 * A request's URL as an error may quote it: without the token of a token-in-path base URL
 * (`/e/<engine>/t/<token>`), as the exchange never repeats one, since callers log these errors.
 */
export const shownUrl = (url: string): string => url.replace(/(\/e\/[^/?#]+\/t\/)[^/?#]+/, "$1[hidden]");

/** Retry-After as seconds: a number of seconds or an HTTP date; null when absent or unreadable. */
export function retryAfterSeconds(header: string | null): number | null {
  if (header === null || header.trim() === "") return null;
  const n = Number(header);
  if (Number.isFinite(n)) return Math.max(0, n);
  const at = Date.parse(header);
  return Number.isNaN(at) ? null : Math.max(0, (at - Date.now()) / 1000);
}
