/**
 * The export: every trajectory that passes the filters, newest first, one JSON line each, streamed
 * a page at a time so that the Worker's memory holds one page whatever the export's size (an
 * isolate has 128 MB). Each page costs two D1 queries, one R2 read per object it touches and,
 * from the second page on, one RPC to the engine's object to check the caller again.
 */
import type { TrajectoryFilters, TrajectoryForm } from "../protocol/ledger";
import { claimBodyBytes, claimKey, countTrajectories, loadPage, summaryPage, type ReadRefusal, type SummaryPage } from "./read";
import { trajectoryJsonPieces } from "./trajectory-json";

/** Trajectories per page: 1,000 D1 queries per invocation then bound an export at 100,000 of them. */
export const EXPORT_PAGE = 200;

/**
 * Bytes of stored call bodies (their deltas) held at once: a page of long agents' claims may hold
 * hundreds of megabytes of them, past an isolate's 128 MB, so a page is loaded in runs of at most
 * this much (a claim of more is a run of its own). Most pages are one run.
 */
export const EXPORT_LOAD_BYTES = 24 * 1024 * 1024;

/** Where each run of `rows` begins: consecutive rows whose bodies are at most `maxBytes` together, at least one a run. */
async function loadRuns(db: D1Database, engine: string, rows: SummaryPage["rows"], maxBytes: number): Promise<number[]> {
  const bytes = await claimBodyBytes(db, engine, rows.map((r) => ({ episode: r.episode_uuid, fence: r.fence })));
  const starts: number[] = [];
  let held = Number.POSITIVE_INFINITY;
  for (const [i, r] of rows.entries()) {
    const b = bytes.get(claimKey(r.episode_uuid, r.fence)) ?? 0;
    if (held + b > maxBytes) {
      starts.push(i);
      held = 0;
    }
    held += b;
  }
  return starts;
}

const enc = new TextEncoder();

/** Why an export stopped before its end: the caller was refused when its next page was to be sent (the detail says why). */
export class ExportRefused extends Error {
  constructor(readonly detail: string) {
    super(`export: stopped before its next page, the caller is refused: ${detail}`);
    this.name = "ExportRefused";
  }
}

/** Header of the export's answer: how many trajectories pass its filters (all of them, whatever its cursor). */
export const TOTAL_HEADER = "x-trajectories-total";

/**
 * Checks the first page before answering (a bad cursor is a 400, not a broken stream), then
 * streams one call of a trajectory per pull: a run of a page's stored deltas is held (at most
 * EXPORT_LOAD_BYTES, or one longer claim's), each trajectory is built (its calls share their
 * messages) and sent a call at a time, so the isolate never holds a whole conversation per call
 * as text, nor a page of trajectories. `total` counts what the filters pass, for a progress bar.
 *
 * An export may stream for minutes, and the caller was checked when it began. So each page after
 * the first is sent only once `recheck` (the engine, asked again) says the caller may still read
 * this incarnation of the engine: a token revoked, or the engine deleted (and perhaps made again
 * under its name, which D1's rows, keyed by name, cannot tell), ends the export at its next page
 * rather than after its last. One RPC per page of EXPORT_PAGE trajectories is little next to the
 * page's own D1 and R2 reads. A refusal errors the stream, as a failed D1 or R2 read mid-stream
 * does: the answer (already 200) is cut off, and a client sees a broken stream, not an end.
 */
export async function exportTrajectories(
  db: D1Database,
  bucket: R2Bucket,
  engine: string,
  filters: TrajectoryFilters,
  cursor: string | undefined,
  form: TrajectoryForm,
  recheck: () => Promise<string | null>,
  loadBytes = EXPORT_LOAD_BYTES,
): Promise<{ stream: ReadableStream<Uint8Array>; total: number } | ReadRefusal> {
  const [first, total] = await Promise.all([summaryPage(db, engine, filters, cursor, EXPORT_PAGE), countTrajectories(db, engine, filters)]);
  if ("ok" in first) return first;
  let page: SummaryPage = first;
  /** Where the page's runs begin (loadRuns), null until read; the run loaded, rows [from, to). */
  let starts: number[] | null = null;
  type Loaded = { from: number; to: number; page: Awaited<ReturnType<typeof loadPage>> };
  let loaded: Loaded | null = null;
  const load = async (i: number): Promise<Loaded> => {
    if (loaded !== null && i >= loaded.from && i < loaded.to) return loaded;
    starts ??= await loadRuns(db, engine, page.rows, loadBytes);
    const run = starts.findLastIndex((s) => s <= i);
    const from = starts[run] ?? 0;
    const to = starts[run + 1] ?? page.rows.length;
    loaded = null; // the last run's bodies go before the next run's come
    loaded = { from, to, page: await loadPage(db, bucket, engine, page.rows.slice(from, to), form) };
    return loaded;
  };
  let at = 0;
  // The trajectory being sent, a call a pull: one line of JSON may be far larger than an isolate's memory.
  let pieces: Generator<string> | null = null;
  const stream = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        if (pieces === null && at === page.rows.length) {
          if (page.next === null) {
            controller.close();
            return;
          }
          const next = await summaryPage(db, engine, filters, page.next, EXPORT_PAGE);
          // The cursor is ours and was valid a page ago: a refusal now would be a bug.
          if ("ok" in next) throw new Error(`export: the next page was refused: ${next.detail}`);
          page = next;
          at = 0;
          starts = null;
          loaded = null;
          // Read first, checked after: an engine still of the export's incarnation after the
          // reads means the rows are that incarnation's (incarnations never come back, and the
          // bodies a later run of the page reads are named by it), and a token still valid then
          // may be sent what they hold. An empty page is checked too, so that a refused export
          // never ends as if it were whole.
          if (page.rows.length > 0) await load(0);
          const refused = await recheck();
          if (refused !== null) throw new ExportRefused(refused);
          if (page.rows.length === 0) {
            controller.close();
            return;
          }
        }
        if (pieces === null) {
          const run = await load(at);
          pieces = trajectoryJsonPieces(run.page.build(at - run.from));
        }
        const next = pieces.next();
        if (next.done !== true) {
          controller.enqueue(enc.encode(next.value));
          return;
        }
        pieces = null;
        at++;
        controller.enqueue(enc.encode("\n"));
      },
    },
    { highWaterMark: 0 },
  );
  return { stream, total };
}
