/**
 * The export: every trajectory that passes the filters, newest first, one JSON line each, streamed
 * a page at a time so that the Worker's memory holds one page whatever the export's size (an
 * isolate has 128 MB). Each page costs two D1 queries and one R2 read per object it touches.
 */
import type { TrajectoryFilters } from "../protocol/ledger";
import { loadTrajectories, summaryPage, type ReadRefusal } from "./read";

/** Trajectories per page: 1,000 D1 queries per invocation then bound an export at 100,000 of them. */
export const EXPORT_PAGE = 200;

const enc = new TextEncoder();

/** Checks the first page before answering (a bad cursor is a 400, not a broken stream), then streams. */
export async function exportTrajectories(
  db: D1Database,
  bucket: R2Bucket,
  engine: string,
  filters: TrajectoryFilters,
  cursor: string | undefined,
): Promise<ReadableStream<Uint8Array> | ReadRefusal> {
  const first = await summaryPage(db, engine, filters, cursor, EXPORT_PAGE);
  if ("ok" in first) return first;
  let page: typeof first | null = first;
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        if (page === null) {
          controller.close();
          return;
        }
        const current = page;
        const trajectories = await loadTrajectories(db, bucket, engine, current.rows);
        controller.enqueue(enc.encode(trajectories.map((t) => `${JSON.stringify(t)}\n`).join("")));
        if (current.next === null) {
          page = null;
          controller.close();
          return;
        }
        const next = await summaryPage(db, engine, filters, current.next, EXPORT_PAGE);
        // The cursor is ours and was valid a page ago: a refusal now would be a bug.
        if ("ok" in next) throw new Error(`export: the next page was refused: ${next.detail}`);
        page = next;
      },
    },
    { highWaterMark: 0 },
  );
}
