/**
 * What an engine operation answers across the RPC boundary. Errors travel as values, not
 * exceptions, so the Worker can turn them into the right 4xx without parsing messages.
 */
export type ErrorStatus = 400 | 401 | 403 | 404 | 409 | 413 | 422 | 500 | 503;

/** `retry_after`: seconds, for a 503 that says when to come back (the Worker's `Retry-After`). */
export type Failure = { ok: false; status: ErrorStatus; error: string; detail: string; retry_after?: number };
export type Reply<T> = { ok: true; body: T } | Failure;

export const ok = <T>(body: T): Reply<T> => ({ ok: true, body });
export const fail = (status: ErrorStatus, error: string, detail: string): Failure => ({ ok: false, status, error, detail });
/** A 503 that stores nothing and is to be sent again after `retryAfter` seconds: a bound is full until something is taken away. */
export const full = (error: string, detail: string, retryAfter: number): Failure => ({ ok: false, status: 503, error, detail, retry_after: retryAfter });
