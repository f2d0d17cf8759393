/**
 * The bindings an engine's Durable Object uses. Kept apart from the Worker's Env, which names
 * this object's class (its ENGINE namespace): the engine needs none of the Worker's others.
 */
export interface EngineEnv {
  DB: D1Database;
  /** The trajectory ledger's call bodies, which retention deletes with their D1 rows. */
  LEDGER: R2Bucket;
  /** Signs the per-claim OpenAI keys handed to clients. */
  CLAIM_KEY_SECRET: string;
  /** Seconds an agent has to ack a command before it is handed out again (default 60). */
  COMMAND_LEASE_SECONDS?: string;
  /** Bytes of the object's SQLite above which requests that add data are refused (default 9 GiB: storage-guard.ts). */
  STORAGE_HIGH_WATER_BYTES?: string;
}
