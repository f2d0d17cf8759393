/**
 * The clear_sessions commands the buffer sends the agent when sessions stop mattering (their
 * group dropped, or delivered without them): pure, so the chunking needs no tables.
 */
import type { CommandBody } from "../protocol/commands";
import { jsonStringBytes } from "../protocol/limits";
import { byCodePoint } from "./code-point-order";

export type SessionOf = { session: string; group: string };
type ClearSessions = Extract<CommandBody, { kind: "clear_sessions" }>;
export type ClearSessionsReason = ClearSessions["reason"];

/**
 * Bytes of ids per clear_sessions command. A group's sessions are unbounded in number, and so
 * are a drop's (up to DROP_BATCH groups, buffer-expiry.ts); each command is a row of the engine's command queue,
 * which must fit MAX_STORED_BYTES, and a request the agent posts to the inference upstream.
 */
const CLEAR_SESSIONS_BYTES = 256 * 1024;

/** The commands that ask to clear `sessions`: their ids sorted in code point order (as the buffer's pulls are), with their groups', in chunks of at most CLEAR_SESSIONS_BYTES. */
export function clearSessionsCommands(sessions: readonly SessionOf[], reason: ClearSessionsReason): ClearSessions[] {
  const out: ClearSessions[] = [];
  let ids: string[] = [];
  let groups = new Set<string>();
  let bytes = 0;
  const flush = () => {
    if (ids.length > 0) out.push({ kind: "clear_sessions", session_ids: ids.sort(byCodePoint), group_ids: [...groups].sort(byCodePoint), reason });
    ids = [];
    groups = new Set();
    bytes = 0;
  };
  // By group, so that a chunk names as few groups as it can.
  const ordered = [...sessions].sort((a, b) => byCodePoint(a.group, b.group) || byCodePoint(a.session, b.session));
  for (const { session, group } of ordered) {
    // Each id as a JSON string and its comma.
    const sessionBytes = jsonStringBytes(session) + 1;
    const groupBytes = jsonStringBytes(group) + 1;
    if (ids.length > 0 && bytes + sessionBytes + (groups.has(group) ? 0 : groupBytes) > CLEAR_SESSIONS_BYTES) flush();
    bytes += sessionBytes + (groups.has(group) ? 0 : groupBytes);
    ids.push(session);
    groups.add(group);
  }
  flush();
  return out;
}
