/**
 * Reading the ledger: trajectory summaries (D1's trajectories rows with their calls counted), and
 * whole trajectories (a claim's calls from D1, their bodies from R2, conversations rebuilt from
 * the stored deltas and checked again turn by turn).
 */
import type { CallBody, Trajectory, TrajectoryCall, TrajectoryFilters, TrajectoryForm, TrajectoryListResponse, TrajectoryOutcome, TrajectorySummary } from "../protocol/ledger";
import { unpackFloats, unpackInts } from "../protocol/packed";
import { chainBeginsWith, chained, chainOf, itemsOf, type Chain } from "./chain";
import { promptOf, rebuildAll, UNKNOWN, type Rebuilt, type StoredCall } from "./rebuild";
import { isPromptDelta, sameMessage, sameToken, sequencePrompt } from "./splice";
import { trainingSequence, type TokenTurn } from "./training-sequence";
import { groupBy, readRanges } from "./ranged-reads";

/**
 * The most calls one trajectory answers with; a claim with more is cut there, and says so
 * (`calls_cut`, its `training` stopping at the bound: docs/ledger.md).
 */
export const MAX_CALLS_PER_TRAJECTORY = 2000;

export type ReadRefusal = { ok: false; status: 400 | 404; error: string; detail: string };
const refuse = (status: 400 | 404, error: string, detail: string): ReadRefusal => ({ ok: false, status, error, detail });

// ---------------------------------------------------------------- the cursor

type Cursor = { engine: string; endedAt: number; id: number };

function b64url(s: string): string {
  return btoa(String.fromCharCode(...new TextEncoder().encode(s)))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");
}

function encodeCursor(c: Cursor): string {
  return b64url(JSON.stringify([c.engine, c.endedAt, c.id]));
}

function decodeCursor(text: string, engine: string): Cursor | ReadRefusal {
  let parsed: unknown;
  try {
    const bin = atob(text.replace(/-/g, "+").replace(/_/g, "/"));
    parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(Uint8Array.from(bin, (ch) => ch.charCodeAt(0))));
  } catch {
    return refuse(400, "bad_cursor", "cursor: not a cursor this exchange handed out; pass back next_cursor as it came.");
  }
  if (!Array.isArray(parsed) || parsed.length !== 3 || typeof parsed[0] !== "string" || !Number.isSafeInteger(parsed[1]) || !Number.isSafeInteger(parsed[2])) {
    return refuse(400, "bad_cursor", "cursor: not a cursor this exchange handed out; pass back next_cursor as it came.");
  }
  if (parsed[0] !== engine) return refuse(400, "bad_cursor", `cursor: it pages engine '${parsed[0]}', not '${engine}'.`);
  return { engine, endedAt: parsed[1] as number, id: parsed[2] as number };
}

// ---------------------------------------------------------------- summaries

type SummaryRow = {
  id: number;
  episode_uuid: string;
  fence: number;
  client_uuid: string;
  task_id: string;
  episode_type: string;
  run: number;
  global_step: number | null;
  outcome: TrajectoryOutcome;
  reward: number | null;
  is_success: number | null;
  ended_at: number;
  workflow_output: string;
  calls: number;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  reasoning_tokens: number;
};

function whereFilters(f: TrajectoryFilters): { sql: string; args: unknown[] } {
  const parts: string[] = [];
  const args: unknown[] = [];
  const add = (sql: string, v: unknown): void => {
    parts.push(sql);
    args.push(v);
  };
  // Rows written before runs (run NULL) are the engine's first run; before outcomes, ended.
  if (f.run !== undefined) add("COALESCE(t.run, 1) = ?", f.run);
  if (f.global_step !== undefined) add("t.global_step = ?", f.global_step);
  if (f.task_id !== undefined) add("t.task_id = ?", f.task_id);
  if (f.outcome !== undefined) add("COALESCE(t.outcome, 'ended') = ?", f.outcome);
  if (f.min_reward !== undefined) add("t.reward >= ?", f.min_reward);
  if (f.max_reward !== undefined) add("t.reward <= ?", f.max_reward);
  if (f.since !== undefined) add("t.ended_at >= ?", f.since);
  if (f.until !== undefined) add("t.ended_at < ?", f.until);
  return { sql: parts.map((p) => ` AND ${p}`).join(""), args };
}

const SUMMARY_COLUMNS = `t.id, t.episode_uuid, t.fence, t.client_uuid, t.task_id, t.episode_type, COALESCE(t.run, 1) AS run, t.global_step,
  COALESCE(t.outcome, 'ended') AS outcome, t.reward, t.is_success, t.ended_at, t.workflow_output`;

/** A page of one query: the page's trajectories first (by the ended_at index), then their calls counted. */
function summarySql(where: string, limit: number): string {
  return `WITH page AS (SELECT ${SUMMARY_COLUMNS} FROM trajectories t WHERE t.engine = ?${where} ORDER BY t.ended_at DESC, t.id DESC LIMIT ${limit})
    SELECT page.*, COUNT(c.call_id) AS calls, COALESCE(SUM(c.prompt_tokens), 0) AS prompt_tokens, COALESCE(SUM(c.completion_tokens), 0) AS completion_tokens,
      COALESCE(SUM(c.cached_tokens), 0) AS cached_tokens, COALESCE(SUM(c.reasoning_tokens), 0) AS reasoning_tokens
    FROM page LEFT JOIN llm_calls c ON c.engine = ? AND c.episode_uuid = page.episode_uuid AND c.fence = page.fence
    GROUP BY page.id ORDER BY page.ended_at DESC, page.id DESC`;
}

type TokenSums = Pick<TrajectorySummary, "prompt_tokens" | "completion_tokens" | "cached_tokens" | "reasoning_tokens">;
const NO_TOKENS: TokenSums = { prompt_tokens: 0, completion_tokens: 0, cached_tokens: 0, reasoning_tokens: 0 };

/** A call without usage, or without a detail, adds nothing, as in the list's query (which sums all of a claim's calls, not the first 2,000). */
function tokenSums(calls: readonly Pick<TrajectoryCall, "usage">[]): TokenSums {
  const sums = { ...NO_TOKENS };
  for (const { usage: u } of calls) {
    if (u === null) continue;
    sums.prompt_tokens += u.prompt_tokens;
    sums.completion_tokens += u.completion_tokens;
    sums.cached_tokens += u.cached_tokens ?? 0;
    sums.reasoning_tokens += u.reasoning_tokens ?? 0;
  }
  return sums;
}

function summary(r: SummaryRow): TrajectorySummary {
  return {
    episode_uuid: r.episode_uuid,
    fence: r.fence,
    client_uuid: r.client_uuid,
    task_id: r.task_id,
    episode_type: r.episode_type,
    run: r.run,
    global_step: r.global_step,
    outcome: r.outcome,
    reward: r.reward,
    is_success: r.is_success === null ? null : r.is_success === 1,
    ended_at: r.ended_at,
    calls: r.calls,
    prompt_tokens: r.prompt_tokens,
    completion_tokens: r.completion_tokens,
    cached_tokens: r.cached_tokens,
    reasoning_tokens: r.reasoning_tokens,
  };
}

export type SummaryPage = { rows: SummaryRow[]; next: string | null };

export async function summaryPage(db: D1Database, engine: string, filters: TrajectoryFilters, cursorText: string | undefined, limit: number): Promise<SummaryPage | ReadRefusal> {
  const w = whereFilters(filters);
  let where = w.sql;
  const args = [engine, ...w.args];
  if (cursorText !== undefined) {
    const c = decodeCursor(cursorText, engine);
    if ("ok" in c) return c;
    // A row value, which SQLite seeks in the index as a range: the same rows spelled with OR were found by a walk from the newest.
    where += " AND (t.ended_at, t.id) < (?, ?)";
    args.push(c.endedAt, c.id);
  }
  const { results } = await db.prepare(summarySql(where, limit)).bind(...args, engine).all<SummaryRow>();
  const last = results.at(-1);
  return { rows: results, next: results.length === limit && last !== undefined ? encodeCursor({ engine, endedAt: last.ended_at, id: last.id }) : null };
}

/** How many trajectories pass the filters (the export says so up front, for a progress bar). */
export async function countTrajectories(db: D1Database, engine: string, filters: TrajectoryFilters): Promise<number> {
  const w = whereFilters(filters);
  const row = await db.prepare(`SELECT COUNT(*) AS n FROM trajectories t WHERE t.engine = ?${w.sql}`).bind(engine, ...w.args).first<{ n: number }>();
  return row?.n ?? 0;
}

export async function listTrajectories(db: D1Database, engine: string, filters: TrajectoryFilters, cursor: string | undefined, limit: number): Promise<TrajectoryListResponse | ReadRefusal> {
  const page = await summaryPage(db, engine, filters, cursor, limit);
  if ("ok" in page) return page;
  return { trajectories: page.rows.map(summary), next_cursor: page.next };
}

// ---------------------------------------------------------------- one trajectory

type CallRow = {
  call_id: string;
  client_uuid: string;
  task_id: string;
  episode_type: string | null;
  run: number;
  endpoint: TrajectoryCall["endpoint"];
  model: string;
  stream: number;
  weight_version: number | null;
  admitted_at: number;
  started_at: number;
  first_byte_at: number | null;
  done_at: number;
  status: number;
  error: string | null;
  finish_reason: string | null;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  cached_tokens: number | null;
  reasoning_tokens: number | null;
  truncated: number;
  body_key: string;
  body_offset: number;
  body_length: number;
};

const dec = new TextDecoder();

/** The bodies of `calls`, one R2 read per object (a claim's calls of one batch are read together: ranged-reads.ts). */
async function readBodies(bucket: R2Bucket, calls: readonly CallRow[]): Promise<Map<string, CallBody | null>> {
  const out = new Map<string, CallBody | null>();
  await readRanges(bucket, calls, (list, bytes, from) => {
    for (const c of list) {
      // A body that retention or an operator removed reads as null: the call's index row still says what it was.
      out.set(c.call_id, bytes === null ? null : (JSON.parse(dec.decode(bytes.subarray(c.body_offset - from, c.body_offset - from + c.body_length))) as CallBody));
    }
  });
  return out;
}

/**
 * What a successful call is to the training sequence: its tokens, or why it has none. "unknown"
 * when they were recorded and are lost (a truncated record, a body gone, a prefix call the ledger
 * does not have), unlike a call recorded without token ids (capture was `messages` then, or off:
 * an uncaptured stub).
 */
function turnOf(index: number, r: CallRow, body: CallBody | null, whole: Rebuilt, logprobs: number[]): TokenTurn {
  if (whole.prompt !== null && whole.completion !== null) return { index, prompt: whole.prompt, completion: whole.completion, logprobs, weightVersion: r.weight_version };
  const idsLost = body !== null && (body.tokens ?? null) !== null;
  return { index, prompt: null, unknown: body === null || r.truncated === 1 || idsLost, idsLost };
}

/** The calls a body names as its prefixes: its messages', its prompt ids', its prompt text's (rebuild.ts prefixCalls, on the stored form). */
function namedCalls(body: CallBody | null): string[] {
  const prompt = body?.params["prompt"];
  return [body?.prefix?.call_id, body?.tokens?.prompt_prefix?.call_id, isPromptDelta(prompt) ? prompt.prefix.call_id : undefined].filter((id): id is string => id !== undefined);
}

/** A stored body as the rebuild reads it. */
function storedOf(body: CallBody | null): StoredCall | null {
  if (body === null) return null;
  const t = body.tokens ?? null;
  const prompt = body.params["prompt"];
  return {
    prefix: body.prefix,
    messages: body.messages,
    answer: body.answer ?? null,
    tokens: t === null ? null : { promptPrefix: t.prompt_prefix ?? null, added: unpackInts(t.prompt_ids), completion: unpackInts(t.completion_ids) },
    prompt: isPromptDelta(prompt) ? prompt : sequencePrompt(prompt),
    tools: body.tools,
    toolsFromPrefix: body.tools_from_prefix,
  };
}

/** What the next call is checked against: a successful call's messages then answer, its prompt ids then completion's, as shown. */
type Shown = { next: Chain<readonly unknown[]>; sequence: Chain<readonly number[]> | null };

/**
 * The calls from the stored deltas, in order, each checked against the successful call before it.
 * Whole form: a call's messages, prompt ids and /v1/completions prompt are made whole only when
 * read (each a getter, so JSON.stringify writes them): the trajectory's answer is written call by
 * call (trajectory-json.ts), and holds one call's history whole at a time. Delta form: each is
 * what the call stored, after what it shares with the call its `*_from` names, named only when
 * that call is known whole and among the calls answered (so a reader can rebuild it:
 * client/ledger-delta.ts); unnamed, it is whole, or with `prefix_missing` only what the call
 * added, as in the whole form. A call stored against one past the bound (`beyond`) is written whole.
 */
function rebuildCalls(claim: ClaimCalls, bodies: Map<string, CallBody | null>, endedAt: number | null, form: TrajectoryForm): { calls: TrajectoryCall[]; turns: TokenTurn[] } {
  const { rows } = claim;
  const byId = rebuildAll(new Map([...rows, ...claim.beyond].map((r) => [r.call_id, storedOf(bodies.get(r.call_id) ?? null)])));
  const delta = form === "delta";
  const answered = new Set(rows.map((r) => r.call_id));
  // Written as what it added to the call `ref` names: in the delta form, when the reader has that call.
  const asAdded = (ref: { call_id: string } | null | undefined): boolean => delta && (ref == null || answered.has(ref.call_id));
  const calls: TrajectoryCall[] = [];
  const turns: TokenTurn[] = [];
  let previous: Shown | null = null;
  rows.forEach((r, index) => {
    const body = bodies.get(r.call_id) ?? null;
    const whole = byId.get(r.call_id) ?? UNKNOWN;
    const { messages, prompt, completion } = whole;
    // Relayed with capture off: nothing of its history is known, so nothing is said to differ,
    // and the next call is checked against the last call that was captured.
    const uncaptured = body?.uncaptured === true;
    const t = body?.tokens ?? null;
    const logprobs = t === null ? [] : unpackFloats(t.completion_logprobs);
    // Shown as what the call added, and said so, rather than as if it were the whole conversation.
    // A /v1/completions prompt stored as a delta is shown whole, or as what it added when that is not known.
    const storedPrompt = body?.params["prompt"];
    const { text } = whole;
    const promptMissing = isPromptDelta(storedPrompt) && text === null;
    const params = !isPromptDelta(storedPrompt)
      ? (body?.params ?? {})
      : text === null || asAdded(storedPrompt.prefix)
        ? { ...body?.params, prompt: storedPrompt.rest }
        : {
            ...body?.params,
            get prompt() {
              return promptOf(text);
            },
          };
    const prefixMissing = body !== null && (messages === null || (t !== null && prompt === null) || promptMissing);
    const shownMessages = messages ?? chainOf(body?.messages ?? []);
    const shownPrompt = prompt ?? (whole.added === null ? null : chainOf(whole.added));
    const messagesSplice = previous === null ? "first" : uncaptured ? "extends" : chainBeginsWith(shownMessages, previous.next, sameMessage) ? "extends" : "rewritten";
    let tokenView: TrajectoryCall["tokens"] = null;
    if (shownPrompt !== null && completion !== null) {
      const prevTokens = previous?.sequence ?? null;
      const splice = previous === null ? "first" : prevTokens !== null && chainBeginsWith(shownPrompt, prevTokens, sameToken) ? "extends" : "rewritten";
      const idsAdded = prompt === null || asAdded(t?.prompt_prefix);
      tokenView = delta
        ? { prompt_from: prompt === null || !idsAdded ? null : (t?.prompt_prefix ?? null), prompt_ids: idsAdded ? (whole.added ?? []) : itemsOf(prompt), completion_ids: completion, completion_logprobs: logprobs, splice }
        : {
            get prompt_ids() {
              return itemsOf(shownPrompt);
            },
            completion_ids: completion,
            completion_logprobs: logprobs,
            splice,
          };
    }
    // Only an answer the client got whole is a turn: a failed call (a stream broken after its
    // status line too) is what the client retried, and its partial completion was never said.
    const succeeded = r.status === 200 && r.error === null;
    if (succeeded) turns.push(turnOf(index, r, body, whole, logprobs));
    const call: TrajectoryCall = {
      call_id: r.call_id,
      endpoint: r.endpoint,
      model: r.model,
      stream: r.stream === 1,
      weight_version: r.weight_version,
      admitted_at: r.admitted_at,
      started_at: r.started_at,
      first_byte_at: r.first_byte_at,
      done_at: r.done_at,
      status: r.status,
      error: r.error,
      finish_reason: r.finish_reason,
      usage:
        r.prompt_tokens === null || r.completion_tokens === null
          ? null
          : { prompt_tokens: r.prompt_tokens, completion_tokens: r.completion_tokens, cached_tokens: r.cached_tokens, reasoning_tokens: r.reasoning_tokens },
      truncated: r.truncated === 1,
      after_claim_end: endedAt !== null && finishedAt(r) > endedAt,
      uncaptured,
      prefix_missing: prefixMissing,
      params,
      ...(delta ? { prompt_from: isPromptDelta(storedPrompt) && text !== null && asAdded(storedPrompt.prefix) ? storedPrompt.prefix : null } : {}),
      tools: whole.tools,
      ...(delta ? { messages_from: messages === null || !asAdded(body?.prefix) ? null : (body?.prefix ?? null) } : {}),
      get messages() {
        return messages === null || asAdded(body?.prefix) ? (body?.messages ?? []) : itemsOf(shownMessages);
      },
      messages_splice: messagesSplice,
      answer: whole.answer as Record<string, unknown> | null,
      tokens: tokenView,
    };
    calls.push(call);
    if (succeeded && !uncaptured) {
      // The rebuilt call's own continuations when known, which the calls continuing it are chained
      // from: chainBeginsWith tells those without making them whole.
      previous = {
        next: whole.next ?? chained(shownMessages, shownMessages.length, whole.answer === null ? [] : [whole.answer]) ?? shownMessages,
        sequence: whole.sequence ?? (shownPrompt === null || completion === null ? null : chained(shownPrompt, shownPrompt.length, completion)),
      };
    }
  });
  return { calls, turns };
}

/**
 * When a call finished by the exchange's clock, the one the claim's end was taken on: its
 * admission (the Worker's clock) and its duration (the gateway's clock, which a GPU host's
 * skew shifts but does not stretch). The gateway's done_at alone, on a host an hour fast,
 * marked every call of every claim as finished after its end.
 */
const finishedAt = (r: { admitted_at: number; started_at: number; done_at: number }): number => r.admitted_at + Math.max(0, r.done_at - r.started_at);

/**
 * The episode's latest fence among its ended rows and its recorded calls (a live claim has only
 * calls), for engine ?1 and episode ?2. Shared with the trajectory's tag (trajectory-tag.ts),
 * which must name the claim this read answers.
 */
export const LATEST_FENCE_SQL = `SELECT MAX(f) AS f FROM (SELECT MAX(fence) AS f FROM trajectories WHERE engine = ?1 AND episode_uuid = ?2
         UNION ALL SELECT MAX(fence) AS f FROM llm_calls WHERE engine = ?1 AND episode_uuid = ?2)`;

/** The order of a claim's calls in its trajectory; the tag's first and last call are taken in it too. */
export const CALL_ORDER = "admitted_at, started_at, call_id";

async function latestFence(db: D1Database, engine: string, episode: string): Promise<number | null> {
  const row = await db.prepare(LATEST_FENCE_SQL).bind(engine, episode).first<{ f: number | null }>();
  return row?.f ?? null;
}

const CALL_COLUMNS = `episode_uuid, fence, call_id, client_uuid, task_id, episode_type, run, endpoint, model, stream, weight_version, admitted_at, started_at,
  first_byte_at, done_at, status, error, finish_reason, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, truncated, body_key, body_offset, body_length`;

/**
 * A claim's first calls, at most MAX_CALLS_PER_TRAJECTORY, and how many it has in all; `beyond`,
 * the calls past that bound which the first calls are stored against (loaded by withBodies).
 */
type ClaimCalls = { rows: CallRow[]; recorded: number; beyond: CallRow[] };

/** The `WHERE` of a set of claims' calls: the engine ?1, the claims ?2 (claimsParam); a seek of llm_calls' index a claim. */
export const OF_CLAIMS_SQL = "engine = ?1 AND (episode_uuid, fence) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?2))";
/** The claims as OF_CLAIMS_SQL's ?2. */
export const claimsParam = (claims: readonly { episode: string; fence: number }[]): string => JSON.stringify(claims.map((c) => [c.episode, c.fence]));

/**
 * The calls of many claims in one query (D1 allows 1,000 queries per Worker invocation, and an
 * export reads thousands of claims), at most MAX_CALLS_PER_TRAJECTORY each. Each claim's count
 * comes with them, so that a claim cut at the bound is known to be: its first calls alone read
 * as a whole claim, and their tokens as its whole training sequence.
 */
async function callsOf(db: D1Database, engine: string, claims: readonly { episode: string; fence: number }[]): Promise<Map<string, ClaimCalls>> {
  const { results } = await db
    .prepare(
      `SELECT * FROM (SELECT ${CALL_COLUMNS}, ROW_NUMBER() OVER (PARTITION BY episode_uuid, fence ORDER BY ${CALL_ORDER}) AS n,
           COUNT(*) OVER (PARTITION BY episode_uuid, fence) AS recorded
         FROM llm_calls WHERE ${OF_CLAIMS_SQL})
       WHERE n <= ${MAX_CALLS_PER_TRAJECTORY} ORDER BY episode_uuid, fence, n`,
    )
    .bind(engine, claimsParam(claims))
    .all<CallRow & { episode_uuid: string; fence: number; recorded: number }>();
  const out = new Map<string, ClaimCalls>();
  for (const r of results) {
    const k = claimKey(r.episode_uuid, r.fence);
    let claim = out.get(k);
    if (claim === undefined) out.set(k, (claim = { rows: [], recorded: r.recorded, beyond: [] }));
    claim.rows.push(r);
  }
  return out;
}

/**
 * How many rounds withBodies looks past the bound for the calls a cut claim's calls are stored
 * against (each round one D1 query): a call's prefix is one that finished before it, so a chain
 * leads past the bound only through concurrent calls, admitted later and finished sooner, each
 * round one of those. Beyond it, the call reads as `prefix_missing`.
 */
const ROUNDS_BEYOND_CUT = 8;

/**
 * Claims' calls (callsOf) and their bodies. A delta names the call it continues by id, and that
 * can be one admitted after it (docs/ledger.md): the last calls of a claim cut at the bound can
 * be stored against calls past it. Those are loaded too, into `beyond`, to rebuild the calls
 * shown, until every call named is loaded or the claim does not have it.
 */
async function withBodies(db: D1Database, bucket: R2Bucket, engine: string, claims: readonly { episode: string; fence: number }[]): Promise<{ calls: Map<string, ClaimCalls>; bodies: Map<string, CallBody | null> }> {
  const calls = claims.length === 0 ? new Map<string, ClaimCalls>() : await callsOf(db, engine, claims);
  const bodies = await readBodies(bucket, [...calls.values()].flatMap((c) => c.rows));
  const cut = claims.flatMap((c) => {
    const claim = calls.get(claimKey(c.episode, c.fence));
    return claim !== undefined && claim.recorded > claim.rows.length ? [{ ...c, claim }] : [];
  });
  const asked = new Set<string>();
  let fresh = cut.map((c) => ({ ...c, rows: c.claim.rows }));
  for (let round = 0; round < ROUNDS_BEYOND_CUT && fresh.length > 0; round++) {
    const wanted: [string, number, string][] = [];
    for (const { episode, fence, claim, rows } of fresh) {
      const held = new Set([...claim.rows, ...claim.beyond].map((r) => r.call_id));
      for (const id of rows.flatMap((r) => namedCalls(bodies.get(r.call_id) ?? null))) {
        if (held.has(id) || asked.has(id)) continue;
        asked.add(id);
        wanted.push([episode, fence, id]);
      }
    }
    if (wanted.length === 0) break;
    const { results } = await db
      .prepare(
        `SELECT ${CALL_COLUMNS} FROM llm_calls WHERE engine = ?1
           AND (episode_uuid, fence, call_id) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?2))`,
      )
      .bind(engine, JSON.stringify(wanted))
      .all<CallRow & { episode_uuid: string; fence: number }>();
    for (const [id, body] of await readBodies(bucket, results)) bodies.set(id, body);
    const found = groupBy(results, (r) => claimKey(r.episode_uuid, r.fence));
    fresh = cut.flatMap((c) => {
      const rows = found.get(claimKey(c.episode, c.fence)) ?? [];
      c.claim.beyond.push(...rows);
      return rows.length === 0 ? [] : [{ ...c, rows }];
    });
  }
  return { calls, bodies };
}

const NO_CALLS: ClaimCalls = { rows: [], recorded: 0, beyond: [] };

const claimKey = (episode: string, fence: number): string => `${fence}\n${episode}`;

function trajectoryOf(episode: string, fence: number, row: SummaryRow | null, claim: ClaimCalls, bodies: Map<string, CallBody | null>, form: TrajectoryForm): Trajectory {
  const calls = claim.rows;
  const built = rebuildCalls(claim, bodies, row?.ended_at ?? null, form);
  const cut = claim.recorded > calls.length;
  const turns = sequenceTurns({ turns: built.turns, calls: calls.length, cut });
  const first = calls[0];
  // A live claim has no row yet: its calls name its client, task, type and run (calls an older agent recorded name no type).
  const head: TrajectorySummary =
    row !== null
      ? summary({ ...row, ...NO_TOKENS, calls: 0 })
      : {
          episode_uuid: episode,
          fence,
          client_uuid: first?.client_uuid ?? "",
          task_id: first?.task_id ?? "",
          episode_type: first?.episode_type ?? "train",
          run: first?.run ?? 1,
          global_step: null,
          outcome: "ended",
          reward: null,
          is_success: null,
          ended_at: 0,
          calls: 0,
          ...NO_TOKENS,
        };
  return {
    ...head,
    outcome: row === null ? null : head.outcome,
    ended_at: row === null ? null : head.ended_at,
    ...tokenSums(built.calls),
    workflow_output: row === null ? null : (JSON.parse(row.workflow_output) as Record<string, unknown>),
    calls: built.calls,
    calls_recorded: claim.recorded,
    calls_cut: cut,
    form,
    training: trainingSequence(turns),
  };
}

/**
 * What a page of ended claims' trajectories are built from, as stored (bodies still the deltas):
 * one D1 query and one R2 read per object. `build(i)` makes the i-th whole trajectory, one at a
 * time, since whole conversations are far larger than their deltas.
 */
export async function loadPage(db: D1Database, bucket: R2Bucket, engine: string, rows: readonly SummaryRow[], form: TrajectoryForm): Promise<{ build(i: number): Trajectory }> {
  const { calls, bodies } = await withBodies(db, bucket, engine, rows.map((r) => ({ episode: r.episode_uuid, fence: r.fence })));
  return {
    build: (i) => {
      const r = rows[i];
      if (r === undefined) throw new Error(`no row ${i} in this page`);
      return trajectoryOf(r.episode_uuid, r.fence, r, calls.get(claimKey(r.episode_uuid, r.fence)) ?? NO_CALLS, bodies, form);
    },
  };
}

export async function readTrajectory(db: D1Database, bucket: R2Bucket, engine: string, episode: string, fence: number | null, form: TrajectoryForm): Promise<Trajectory | ReadRefusal> {
  const f = fence ?? (await latestFence(db, engine, episode));
  const missing = refuse(404, "unknown_trajectory", `No trajectory of episode '${episode}'${fence === null ? "" : ` with fence ${fence}`} on engine '${engine}'.`);
  if (f === null) return missing;
  const [row, { calls, bodies }] = await Promise.all([
    db.prepare(`SELECT ${SUMMARY_COLUMNS} FROM trajectories t WHERE t.engine = ? AND t.episode_uuid = ? AND t.fence = ?`).bind(engine, episode, f).first<SummaryRow>(),
    withBodies(db, bucket, engine, [{ episode, fence: f }]),
  ]);
  const claim = calls.get(claimKey(episode, f)) ?? NO_CALLS;
  if (row === null && claim.rows.length === 0) return missing;
  return trajectoryOf(episode, f, row, claim, bodies, form);
}

/** A claim's successful calls as the training reads them, of its `calls` first calls; `cut` when it has more (MAX_CALLS_PER_TRAJECTORY). */
export type ClaimTurns = { turns: TokenTurn[]; calls: number; cut: boolean };

/**
 * The R2 objects each claim's call bodies are in (by claimKey), one D1 query of distinct pairs: a
 * claim whose calls went out with other claims' shares its objects with them.
 */
export async function claimObjects(db: D1Database, engine: string, claims: readonly { episode: string; fence: number }[]): Promise<Map<string, string[]>> {
  const out = new Map<string, string[]>();
  if (claims.length === 0) return out;
  const { results } = await db
    .prepare(
      `SELECT DISTINCT episode_uuid, fence, body_key FROM llm_calls
       WHERE ${OF_CLAIMS_SQL}`,
    )
    .bind(engine, claimsParam(claims))
    .all<{ episode_uuid: string; fence: number; body_key: string }>();
  for (const [k, rows] of groupBy(results, (r) => claimKey(r.episode_uuid, r.fence))) out.set(k, rows.map((r) => r.body_key));
  return out;
}

/** Bytes of the stored call bodies of each claim (by claimKey), one D1 query of their index rows; a claim without calls has none. */
export async function claimBodyBytes(db: D1Database, engine: string, claims: readonly { episode: string; fence: number }[]): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  if (claims.length === 0) return out;
  const { results } = await db
    .prepare(
      `SELECT episode_uuid, fence, SUM(body_length) AS bytes FROM llm_calls
       WHERE ${OF_CLAIMS_SQL}
       GROUP BY episode_uuid, fence`,
    )
    .bind(engine, claimsParam(claims))
    .all<{ episode_uuid: string; fence: number; bytes: number }>();
  for (const r of results) out.set(claimKey(r.episode_uuid, r.fence), r.bytes);
  return out;
}

/**
 * The turns of claims, for the rollout buffer's items (rollout-tokens.ts): their index rows (one
 * D1 query, at most MAX_CALLS_PER_TRAJECTORY a claim) and bodies read at once, one claim rebuilt
 * at a time; a claim without recorded calls has none. The turns' prompts are chains sharing the
 * claim's history (chain.ts): linear in the claim, made whole only when read.
 */
export async function claimTurns(db: D1Database, bucket: R2Bucket, engine: string, claims: readonly { episode: string; fence: number }[]): Promise<Map<string, ClaimTurns>> {
  const out = new Map<string, ClaimTurns>();
  if (claims.length === 0) return out;
  const { calls, bodies } = await withBodies(db, bucket, engine, claims);
  for (const c of claims) {
    const claim = calls.get(claimKey(c.episode, c.fence));
    if (claim === undefined) continue;
    out.set(claimKey(c.episode, c.fence), { turns: rebuildCalls(claim, bodies, null, "whole").turns, calls: claim.rows.length, cut: claim.recorded > claim.rows.length });
  }
  return out;
}

/**
 * The turns the training sequence reads: the calls past the bound are turns whose tokens the
 * trajectory does not have, as a truncated call's, so the sequence stops at the first of them
 * (`drift_at_call`), and the rollout buffer gives it no tokens.
 */
export const sequenceTurns = (c: ClaimTurns): TokenTurn[] => (c.cut ? [...c.turns, { index: c.calls, prompt: null, unknown: true, idsLost: false }] : c.turns);

export { claimKey };
