/** The size rules a step row must meet before the buffer stores it: pure, so they need no tables. */
import type { StepRow, VersionedStepRow } from "../protocol/buffer";
import { formatBytes, jsonStringBytes, MAX_JSON_BYTES_PER_UNIT, MAX_STORED_BYTES, storedTooLarge, utf8Bytes } from "../protocol/limits";

/** A row that may be stored, with the JSON of its messages and of its free-form fields. */
export type CheckedStep = { row: VersionedStepRow; messages: string; extra: string };

/**
 * The row with its JSON texts (the messages, and the free-form fields: every one the buffer has
 * no column for), and its weight version: `version` when it names none.
 */
export function checkedStep(row: StepRow, version: number): CheckedStep {
  const { session_id: _s, group_id: _g, step_index: _i, messages, response: _r, reward: _w, truncated: _t, is_session_completed: _c, weight_version, failed_infra: _f, ...extra } = row;
  return { row: { ...row, weight_version: weight_version ?? version }, messages: JSON.stringify(messages), extra: JSON.stringify(extra) };
}

/**
 * Why a row is too large, or null. Its messages and response count against max_message_bytes
 * in bytes of UTF-8. Its outbox record holds the messages', response's and extra fields' texts
 * escaped once more inside its JSON, and that record is the largest thing the row becomes (the
 * engine's row and D1's hold them unescaped): it must fit MAX_STORED_BYTES. Short rows are not
 * counted: each UTF-16 unit is at most 3 bytes of UTF-8 and at most 6 escaped.
 */
export function sizeRefusal(at: string, step: CheckedStep, maxMessageBytes: number): string | null {
  const { messages, extra } = step;
  const { response } = step.row;
  if ((messages.length + response.length) * 3 > maxMessageBytes) {
    const bytes = utf8Bytes(messages) + utf8Bytes(response);
    if (bytes > maxMessageBytes) {
      return `${at}: messages and response are ${formatBytes(bytes)} of UTF-8; this engine takes at most ${formatBytes(maxMessageBytes)} per row (max_message_bytes)`;
    }
  }
  if ((messages.length + response.length + extra.length) * MAX_JSON_BYTES_PER_UNIT + 6 <= MAX_STORED_BYTES) return null;
  return storedTooLarge(`${at} (its messages, response and extra fields)`, jsonStringBytes(messages) + jsonStringBytes(response) + jsonStringBytes(extra));
}
