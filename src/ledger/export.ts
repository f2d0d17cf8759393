/**
 * The export: every trajectory that passes the filters, newest first, one JSON line each, streamed
 * a page at a time so that the Worker's memory holds one page whatever the export's size (an
 * isolate has 128 MB). Each page costs two D1 queries, one R2 read per object it touches and,
 * from the second page on, one RPC to the engine's object to check the caller again.
 */
import type { TrajectoryFilters, TrajectoryForm } from "../protocol/ledger";
import { countTrajectories, loadPage, summaryPage, type ReadRefusal, type SummaryPage } from "./read";
import { trajectoryJsonPieces } from "./trajectory-json";

/** Trajectories per page: 1,000 D1 queries per invocation then bound an export at 100,000 of them. */
export const EXPORT_PAGE = 200;

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
 * streams one call of a trajectory per pull: a page's stored deltas are held (a few MB), each
 * trajectory is built (its calls share their messages) and sent a call at a time, so the isolate
 * never holds a whole conversation per call as text, nor a page of trajectories. `total` counts
 * what the filters pass, for a progress bar.
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
): Promise<{ stream: ReadableStream<Uint8Array>; total: number } | ReadRefusal> {
  const [first, total] = await Promise.all([summaryPage(db, engine, filters, cursor, EXPORT_PAGE), countTrajectories(db, engine, filters)]);
  if ("ok" in first) return first;
  let page: SummaryPage = first;
  let loaded: Awaited<ReturnType<typeof loadPage>> | null = null;
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
          // Read first, checked after: an engine still of the export's incarnation after the
          // reads means the rows are that incarnation's (incarnations never come back), and a
          // token still valid then may be sent what they hold. An empty page is checked too, so
          // that a refused export never ends as if it were whole.
          loaded = page.rows.length === 0 ? null : await loadPage(db, bucket, engine, page.rows, form);
          const refused = await recheck();
          if (refused !== null) throw new ExportRefused(refused);
          if (page.rows.length === 0) {
            controller.close();
            return;
          }
        }
        loaded ??= await loadPage(db, bucket, engine, page.rows, form);
        pieces ??= trajectoryJsonPieces(loaded.build(at));
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
