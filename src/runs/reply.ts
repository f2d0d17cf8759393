/**
 * What a runs operation answers. Like the engine's Reply, errors are values; a refusal may
 * carry hints (the locked value, the fields or environments there are, the active run) that
 * the REST answer and the MCP tool result both include, so an LLM agent can correct itself.
 */
import type { ErrorStatus, Failure } from "../engine/reply";
import type { JsonValue } from "../protocol/runs";

export type Refused = Failure & { hints: Record<string, JsonValue> };
export type RunsReply<T> = { ok: true; body: T } | Refused;

export const done = <T>(body: T): RunsReply<T> => ({ ok: true, body });
/** A value too large to store, with why (protocol/limits.ts says it): 413, as the engine answers one. */
export const tooLarge = (detail: string): Refused => refuse(413, "payload_too_large", detail);

export const refuse = (status: ErrorStatus, error: string, detail: string, hints: Record<string, JsonValue> = {}): Refused => ({
  ok: false,
  status,
  error,
  detail,
  hints,
});
