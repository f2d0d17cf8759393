/**
 * The engine-wide bound on what its Durable Object stores. Each store of the engine has its own
 * bound (the buffer's and Atropos's bytes, the row sizes), but together, with the outbox and the
 * commands that wait for D1 and the agent, they can still pass the 10 GB the object's SQLite
 * holds, after which every write fails: the ones that free space too. Above a high-water bound
 * below it, requests that add data are refused (503 storage_full, Retry-After) while those that
 * free space (pulls, acks, deletes, claims) go on.
 */
import { DO_MAX_DATABASE_BYTES, formatBytes } from "../protocol/limits";
import { DEFAULT_STORAGE_HIGH_WATER_BYTES, STORAGE_FULL_RETRY_SECONDS, type StorageOverview } from "../protocol/storage";
import { full, type Failure } from "./reply";

/** The least high-water bound an env var may set: below it, an engine could refuse its first rows. */
export const MIN_STORAGE_HIGH_WATER_BYTES = 1024 * 1024;

/**
 * The bound from STORAGE_HIGH_WATER_BYTES, else the default. A value that is no whole number of
 * bytes between the least and 10 GB is logged and ignored: an engine that refused every write
 * over a typo, or never refused any, would be worse than the default.
 */
export function highWaterFrom(value: string | undefined): number {
  if (value === undefined || value.trim() === "") return DEFAULT_STORAGE_HIGH_WATER_BYTES;
  const n = Number(value);
  if (Number.isSafeInteger(n) && n >= MIN_STORAGE_HIGH_WATER_BYTES && n < DO_MAX_DATABASE_BYTES) return n;
  console.error(`engine: STORAGE_HIGH_WATER_BYTES=${JSON.stringify(value)} is not a number of bytes from ${MIN_STORAGE_HIGH_WATER_BYTES} to below ${DO_MAX_DATABASE_BYTES}; using ${DEFAULT_STORAGE_HIGH_WATER_BYTES}`);
  return DEFAULT_STORAGE_HIGH_WATER_BYTES;
}

export class StorageGuard {
  constructor(
    private readonly sql: SqlStorage,
    private readonly highWater: () => number,
  ) {}

  /**
   * Bytes in use: workerd's databaseSize is (page_count - freelist_count) x page_size, so the
   * free pages a delete leaves in the file do not count (SQLite reuses them before it grows the
   * file). The pragmas themselves are refused to the object's code (SQLITE_AUTH), but for
   * page_size.
   */
  usedBytes(): number {
    return this.sql.databaseSize;
  }

  /** The 503 for a request that would add data now, or null while the store is below its bound. */
  refusal(what: string): Failure | null {
    const used = this.usedBytes();
    const bound = this.highWater();
    if (used <= bound) return null;
    return full(
      "storage_full",
      `This engine's store holds ${formatBytes(used)}, above its bound of ${formatBytes(bound)} (a Durable Object holds ${formatBytes(DO_MAX_DATABASE_BYTES)}): ${what} is refused and nothing was stored. Space comes back as the trainer pulls its data, the agent acks its commands and D1 takes the outbox; send it again later.`,
      STORAGE_FULL_RETRY_SECONDS,
    );
  }

  view(): StorageOverview {
    return { used_bytes: this.usedBytes(), high_water_bytes: this.highWater(), max_bytes: DO_MAX_DATABASE_BYTES };
  }
}
