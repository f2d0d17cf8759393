/**
 * How full an engine's Durable Object is: the one SQLite database that holds everything the
 * engine keeps (episodes, the outbox, commands, the rollout buffer, Atropos's groups), and the
 * bound above which requests that add data are refused (src/engine/storage-guard.ts).
 */
import { z } from "zod";

const GIB = 1024 * 1024 * 1024;

/**
 * The default high-water bound: 9 GiB (9,663,676,416 bytes) of the 10 GB a Durable Object's
 * SQLite holds. The bound is checked before a request writes, so the last requests admitted
 * below it still land above it (an Atropos list inflates to 16 MiB, stored again in the outbox;
 * the hot writes that share a turn each check before any of them commits), and the writes that
 * are never refused go on: claims, reaps and their records, commands, status. The ~336 MB left
 * is room for hundreds of the largest of those, so that the 10 GB itself, at which every write
 * fails (a pull and an ack too, which are how space is freed), is not reached.
 */
export const DEFAULT_STORAGE_HIGH_WATER_BYTES = 9 * GIB;

/** Seconds a refused writer waits before sending again: space comes back as trainers pull and D1 takes the outbox (every few seconds). */
export const STORAGE_FULL_RETRY_SECONDS = 30;

export const StorageOverview = z.object({
  /**
   * Bytes of the engine's SQLite database in use: its pages times the page size, less the free
   * pages that deletes leave in the file (ctx.storage.sql.databaseSize, which counts it so).
   */
  used_bytes: z.number().int(),
  /** Above this, requests that add data are refused 503 `storage_full` (docs/operations.md). */
  high_water_bytes: z.number().int(),
  /** What a Durable Object's SQLite holds at most (limits.ts DO_MAX_DATABASE_BYTES): a number, not that literal, so that readers take a raised limit as given. */
  max_bytes: z.number().int(),
});
export type StorageOverview = z.infer<typeof StorageOverview>;
