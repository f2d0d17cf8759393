/**
 * A claim's call bodies gathered into one R2 object of its own once the claim is over.
 *
 * The gateway ships whatever calls of all its concurrent claims finished within a second as one
 * batch, one object (ingest.ts): a claim of 100 turns has its bodies in about 100 objects, each
 * shared with every claim relayed beside it. Reading one claim then reads (a range of) each of
 * them, and a trainer's pull of hundreds of such claims either makes more R2 reads than an
 * invocation may or holds hundreds of claims' bodies at once (rollout-tokens.ts). Gathered, a
 * claim is one read.
 *
 * The bytes are copied as they are, never parsed: each call's line keeps its length, and its
 * index row its new key and offset. A row is moved only if it still points where it was read
 * from, so a compaction racing another, or retention, moves nothing twice and loses nothing.
 * The old objects stay until retention deletes their day; the new one is named in the latest of
 * their days, so it outlives none of them and is deleted with the last (retention.ts).
 */
import { bodyPrefix } from "./keys";
import { digestOf } from "./ingest";
import { CALL_ORDER, claimsParam, MAX_CALLS_PER_TRAJECTORY, OF_CLAIMS_SQL } from "./read";
import { groupBy, readRanges } from "./ranged-reads";

/** Bytes one gathered object holds at most: they are held in memory while it is written. */
export const COMPACT_MAX_BYTES = 16 * 1024 * 1024;

type Row = { episode_uuid: string; fence: number; call_id: string; body_key: string; body_offset: number; body_length: number; order: number };
export type ClaimName = { episode: string; fence: number };

/**
 * What became of a claim: `done` when nothing more can be gathered (one object, the rest would
 * not fit, or its objects are gone); `more` when the run's reads or bytes ran out first;
 * `stopped` when the engine's delete began before it was written; `failed` when writing it
 * failed (`error`).
 */
export type Gathered = { episode: string; fence: number; moved: number; state: "done" | "more" | "stopped" | "failed"; error?: unknown };

/**
 * `reads`: the R2 reads the compaction may still make, each object read takes one;
 * `statements`: the D1 statements it may still send (its invocation's share of D1's 1,000),
 * counted down like `reads`, its one read of the rows included (none sent without two); `stop`:
 * the engine's delete began, nothing more is written; `maxBytes`: COMPACT_MAX_BYTES unless told.
 */
export type CompactOptions = { reads: number; statements?: number; stop?: () => boolean; maxBytes?: number };

const claimOf = (episode: string, fence: number): string => `${fence}\n${episode}`;

/** A claim's part of a run: the objects it gathers (in the order of its calls) and their rows. */
type Plan = { claim: ClaimName; rows: Row[]; objects: number; state: "done" | "more" };

/**
 * Gathers each claim's bodies into one object. The claims of one run share their reads: claims
 * that ran side by side have their calls in the same batch objects, and each object is read
 * once, a range spanning all the run's calls in it. At most `opts.reads` objects are read (it
 * counts them down) and `opts.maxBytes` held; a claim that does not fit is gathered as far as it
 * does, or waits (`more`). Only rows under the engine's own prefix are moved (an archived
 * engine's are not its).
 */
export async function compactClaims(db: D1Database, bucket: R2Bucket, engine: { name: string; incarnation: string }, claims: readonly ClaimName[], opts: CompactOptions): Promise<Gathered[]> {
  if (claims.length === 0) return [];
  // The rows' read, and at least one statement to move some of them.
  if (opts.statements !== undefined) {
    if (opts.statements < 2) return claims.map((c) => ({ ...c, moved: 0, state: "more" }));
    opts.statements--;
  }
  // A claim's first MAX_CALLS_PER_TRAJECTORY calls: all that a trajectory or a pull reads of it.
  const { results } = await db
    .prepare(
      `SELECT episode_uuid, fence, call_id, body_key, body_offset, body_length FROM (
         SELECT episode_uuid, fence, call_id, body_key, body_offset, body_length, ROW_NUMBER() OVER (PARTITION BY episode_uuid, fence ORDER BY ${CALL_ORDER}) AS n
         FROM llm_calls WHERE ${OF_CLAIMS_SQL})
       WHERE n <= ${MAX_CALLS_PER_TRAJECTORY} ORDER BY episode_uuid, fence, n`,
    )
    .bind(engine.name, claimsParam(claims))
    .all<Row>();
  const prefix = bodyPrefix(engine.name, engine.incarnation);
  for (const [order, r] of results.entries()) r.order = order;
  const byClaim = groupBy(
    results.filter((r) => r.body_key.startsWith(prefix)),
    (r) => claimOf(r.episode_uuid, r.fence),
  );
  const plans = plan(claims, byClaim, opts);
  const wanted = plans.flatMap((p) => (p.objects >= 2 ? p.rows : []));
  const stop = opts.stop ?? (() => false);
  // A delete that began may fail and reopen the engine: a claim a stop kept from being written says so, whatever stop() says later.
  const stoppedFirst = wanted.length > 0 && stop();
  const bytes = wanted.length === 0 || stoppedFirst ? new Map<string, Uint8Array>() : await readRows(bucket, wanted);
  const out: Gathered[] = [];
  for (const p of plans) {
    if (p.objects < 2) {
      out.push({ ...p.claim, moved: 0, state: p.state });
      continue;
    }
    try {
      const moved = stoppedFirst || stop() ? null : await writeClaim(db, bucket, engine.name, prefix, p.rows, bytes, stop);
      // Its objects gone (retention, an operator), a claim is left as it is: its reads would be spent on them again.
      out.push({ ...p.claim, moved: moved ?? 0, state: moved === null ? "stopped" : moved === 0 ? "done" : p.state });
    } catch (error) {
      out.push({ ...p.claim, moved: 0, state: "failed", error });
    }
  }
  return out;
}

/** Statements that move `rows` rows. */
const statementsFor = (rows: number): number => Math.ceil(rows / MOVES_PER_STATEMENT);

/** Each claim's objects to gather, in the claims' order, within the reads, the statements and the bytes. */
function plan(claims: readonly ClaimName[], byClaim: Map<string, Row[]>, opts: CompactOptions): Plan[] {
  const maxBytes = opts.maxBytes ?? COMPACT_MAX_BYTES;
  const read = new Set<string>();
  let bytes = 0;
  return claims.map((claim) => {
    const byObject = groupBy(byClaim.get(claimOf(claim.episode, claim.fence)) ?? [], (r) => r.body_key);
    if (byObject.size <= 1) return { claim, rows: [], objects: 0, state: "done" };
    const rows: Row[] = [];
    let objects = 0;
    let short = false;
    const others = bytes;
    for (const [key, list] of byObject) {
      if ((!read.has(key) && opts.reads === 0) || (opts.statements !== undefined && statementsFor(rows.length + list.length) > opts.statements)) {
        short = true;
        break;
      }
      const size = list.reduce((n, r) => n + r.body_length, 0);
      if (bytes + size > maxBytes) {
        // Past the bytes a run holds: it waits for a run of its own if other claims' filled this one.
        short ||= others > 0;
        continue;
      }
      if (!read.has(key)) {
        read.add(key);
        opts.reads--;
      }
      rows.push(...list);
      objects++;
      bytes += size;
    }
    // One object is gathered already: its bytes are let go again.
    if (objects < 2) bytes -= rows.reduce((n, r) => n + r.body_length, 0);
    else if (opts.statements !== undefined) opts.statements -= statementsFor(rows.length);
    return { claim, rows: objects < 2 ? [] : rows, objects, state: short ? "more" : "done" };
  });
}

/** One claim's rows that were read, one after the other, as an object of its own: the rows that now point to it; null when a stop came first. */
async function writeClaim(db: D1Database, bucket: R2Bucket, engine: string, prefix: string, rows: readonly Row[], bytes: Map<string, Uint8Array>, stop: () => boolean): Promise<number | null> {
  const ordered = [...rows].sort((a, b) => a.order - b.order);
  const kept = ordered.filter((r) => bytes.has(r.call_id));
  if (new Set(kept.map((r) => r.body_key)).size < 2) return 0;
  const object = new Uint8Array(kept.reduce((n, r) => n + r.body_length, 0));
  const moves: [string, string, number, number][] = [];
  let at = 0;
  for (const r of kept) {
    object.set(bytes.get(r.call_id) as Uint8Array, at);
    moves.push([r.call_id, r.body_key, r.body_offset, at]);
    at += r.body_length;
  }
  // Named in the latest day of those it gathers (`<prefix><day>/...`), so that retention deletes it with the last of them.
  const day = kept.map((r) => r.body_key.slice(prefix.length, prefix.length + "YYYY-MM-DD".length)).reduce((a, b) => (b > a ? b : a));
  const key = `${prefix}${day}/claim-${await digestOf(object)}.jsonl`;
  await bucket.put(key, object, { httpMetadata: { contentType: "application/x-ndjson" } });
  if (stop()) {
    await bucket.delete(key);
    return null;
  }
  const statements = [];
  for (let i = 0; i < moves.length; i += MOVES_PER_STATEMENT) statements.push(db.prepare(MOVE_SQL).bind(engine, key, JSON.stringify(moves.slice(i, i + MOVES_PER_STATEMENT))));
  // One claim's rows move together (one transaction), or none does.
  return (await db.batch(statements)).reduce((n, r) => n + r.meta.changes, 0);
}

/**
 * Moves rows `[call_id, old key, old offset, new offset]` (?3) to the object ?2, each only if it
 * is still where it was read. Each row is found by its key (engine, call_id); an UPDATE ... FROM
 * json_each would scan every call of the engine once per row. Its moves are looked up in ?3 by
 * a scan each: MOVES_PER_STATEMENT keeps that quadratic part small.
 */
const MOVE_SQL = `UPDATE llm_calls SET body_key = ?2,
    body_offset = (SELECT json_extract(m.value, '$[3]') FROM json_each(?3) AS m WHERE json_extract(m.value, '$[0]') = llm_calls.call_id)
  WHERE engine = ?1 AND call_id IN (SELECT json_extract(value, '$[0]') FROM json_each(?3))
    AND body_key || ' ' || body_offset = (SELECT json_extract(m.value, '$[1]') || ' ' || json_extract(m.value, '$[2]') FROM json_each(?3) AS m WHERE json_extract(m.value, '$[0]') = llm_calls.call_id)`;
const MOVES_PER_STATEMENT = 200;

/**
 * Each row's bytes, copied out of one ranged read per object (the run's rows in it: ranged-reads.ts),
 * so that no read is held past its rows; a row whose object is gone (retention, an operator) or
 * shorter than its rows say is left out.
 */
async function readRows(bucket: R2Bucket, rows: readonly Row[]): Promise<Map<string, Uint8Array>> {
  const out = new Map<string, Uint8Array>();
  await readRanges(bucket, rows, (list, got, from, length) => {
    if (got === null || got.byteLength < length) return;
    for (const r of list) out.set(r.call_id, got.slice(r.body_offset - from, r.body_offset - from + r.body_length));
  });
  return out;
}
