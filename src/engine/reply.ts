/**
 * What an engine operation answers across the RPC boundary. Errors travel as values, not
 * exceptions, so the Worker can turn them into the right 4xx without parsing messages.
 */
export type ErrorStatus = 400 | 401 | 403 | 404 | 409 | 413 | 422 | 500 | 503;

export type Failure = { ok: false; status: ErrorStatus; error: string; detail: string };
export type Reply<T> = { ok: true; body: T } | Failure;

export const ok = <T>(body: T): Reply<T> => ({ ok: true, body });
export const fail = (status: ErrorStatus, error: string, detail: string): Failure => ({ ok: false, status, error, detail });
