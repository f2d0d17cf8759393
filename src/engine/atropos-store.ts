/**
 * The Atropos API's tables in the engine's SQLite (migration 9) and its small state (kv
 * `atropos`): what Atropos's run-api kept in its process's memory (app.state), so that a restart
 * keeps registrations, environments, the queue, the cut batches and the step.
 *
 * A scored group is one row of atropos_groups, its JSON as Atropos answers it (payload), whose
 * place says where it is: queued, buffered (a group of another size than its env's, waiting for
 * others to make one of the right size), held (larger than the batch: set aside rather than
 * blocking every batch), cut into a batch (batch, pos), or kept only as the latest example.
 * Ids follow the order groups joined the queue, so the queue's order is the id's.
 *
 * A group's JSON longer than one row may hold (a group of long sequences with their logprobs is
 * megabytes) goes on in atropos_parts, PIECE_UNITS at a time; a trigger deletes a group's parts
 * with its row.
 *
 * The state counts the payloads' bytes (stored_bytes) as well as the groups: the methods that
 * delete rows return the bytes they freed, for the hub to take off the state it saves.
 * Bytes are SQLite's octet_length of the payload and its parts, their UTF-8, kept in the row's
 * `bytes`, which a recount reads.
 */
import type { QueueIndex } from "./atropos-packing";

/**
 * UTF-16 units of a group's JSON per row, its own or a part's: UTF-8 takes at most 3 bytes for
 * each, so a row holds at most 1,800,000 bytes of it, under the 2,000,000 one may.
 */
export const PIECE_UNITS = 600_000;

/** `text` in pieces of at most PIECE_UNITS units, never cut inside a surrogate pair (SQLite's text would keep each half as U+FFFD). */
export function payloadPieces(text: string): string[] {
  const out: string[] = [];
  for (let at = 0; at < text.length; ) {
    let end = Math.min(text.length, at + PIECE_UNITS);
    const last = text.charCodeAt(end - 1);
    if (end < text.length && last >= 0xd800 && last <= 0xdbff) end--;
    out.push(text.slice(at, end));
    at = end;
  }
  return out.length === 0 ? [""] : out;
}

/** app.state of Atropos's server. Null fields are attributes its server has not set yet. */
export type AtroposState = {
  /** hasattr(app.state, "queue"): set by /register and the first scored group, deleted by /reset_data. */
  queue: boolean;
  /** /register has set its attributes (wandb group and project, batch size, step, envs...). */
  registered: boolean;
  /** app.state.started: null until /register, true from the first /batch. */
  started: boolean | null;
  group: string | null;
  project: string | null;
  batch_size: number;
  /** Kept by /reset_data, as Atropos keeps it. */
  max_token_len: number | null;
  step: number;
  checkpoint_dir: string;
  save_checkpoint_interval: number;
  num_steps: number;
  requesters: number;
  /** The number the next cut batch gets; batches are handed out newest first, as Atropos pops its list. */
  next_batch: number;
  /** Rows holding a group Atropos still has (queued, buffered, held or cut): what max_groups bounds. */
  stored: number;
  /**
   * Bytes of every row's payload (what max_stored_bytes bounds): more rows than `stored`, since
   * the latest example's row and those of taken batches still being sent take room in the store too.
   */
  stored_bytes: number;
  /** The row of /latest_example, or null before any group was queued. */
  latest: number | null;
};

export const INITIAL_ATROPOS_STATE: AtroposState = {
  queue: false,
  registered: false,
  started: null,
  group: null,
  project: null,
  batch_size: -1,
  max_token_len: null,
  step: 0,
  checkpoint_dir: "",
  save_checkpoint_interval: 0,
  num_steps: -1,
  requesters: 0,
  next_batch: 1,
  stored: 0,
  stored_bytes: 0,
  latest: null,
};

/** One of app.state.envs. */
export type AtroposEnv = {
  env_id: number;
  desired_name: string;
  real_name: string;
  max_context_len: number;
  weight: number;
  group_size: number;
  min_batch_allocation: number | null;
  connected: boolean;
  last_update: number;
};

type EnvRow = Omit<AtroposEnv, "connected"> & { connected: number };

/** A group's env as the tables key it: its env_id as text, or "none". */
export const envKey = (envId: number | null): string => (envId === null ? "none" : String(envId));

type PayloadRow = { id: number; payload: string; parts: number };

export class AtroposStore implements QueueIndex {
  constructor(
    private readonly sql: SqlStorage,
    private readonly kv: { get<T>(k: string): T | null; set(k: string, v: unknown): void },
  ) {}

  state(): AtroposState {
    const saved = this.kv.get<Partial<AtroposState>>("atropos");
    const s = { ...INITIAL_ATROPOS_STATE, ...(saved ?? {}) };
    if (saved !== null && saved.stored_bytes === undefined) {
      // Saved before the bytes were counted: counted from the table once (each row's `bytes`),
      // and kept from then on.
      s.stored_bytes = this.payloadBytes();
      this.saveState(s);
    }
    return s;
  }

  /** Bytes of every row's payload, counted from the table. */
  payloadBytes(): number {
    return this.sql.exec<{ b: number }>("SELECT COALESCE(SUM(bytes), 0) AS b FROM atropos_groups").one().b;
  }

  saveState(s: AtroposState): void {
    this.kv.set("atropos", s);
  }

  // ------------------------------------------------------------ environments

  envs(): AtroposEnv[] {
    return this.sql
      .exec<EnvRow>("SELECT * FROM atropos_envs ORDER BY env_id")
      .toArray()
      .map((r) => ({ ...r, connected: r.connected === 1 }));
  }

  addEnv(e: AtroposEnv): void {
    this.sql.exec(
      "INSERT INTO atropos_envs (env_id, desired_name, real_name, max_context_len, weight, group_size, min_batch_allocation, connected, last_update) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
      e.env_id,
      e.desired_name,
      e.real_name,
      e.max_context_len,
      e.weight,
      e.group_size,
      e.min_batch_allocation,
      e.connected ? 1 : 0,
      e.last_update,
    );
  }

  updateEnv(envId: number, change: { connected?: boolean; group_size?: number }): void {
    if (change.connected !== undefined) this.sql.exec("UPDATE atropos_envs SET connected = ? WHERE env_id = ?", change.connected ? 1 : 0, envId);
    if (change.group_size !== undefined) this.sql.exec("UPDATE atropos_envs SET group_size = ? WHERE env_id = ?", change.group_size, envId);
  }

  // ------------------------------------------------------------ groups

  /** Stores a group; returns its id and its payload's bytes as the table counts them. */
  add(env: string, size: number, place: "queue" | "buffer", payload: string): { id: number; bytes: number } {
    const [head, ...rest] = payloadPieces(payload);
    const row = this.sql
      .exec<{ id: number; bytes: number }>(
        "INSERT INTO atropos_groups (env, size, place, payload, parts, bytes) VALUES (?1, ?2, ?3, ?4, ?5, octet_length(?4)) RETURNING id, bytes",
        env,
        size,
        place,
        head ?? "",
        rest.length,
      )
      .one();
    if (rest.length > 0) {
      let bytes = row.bytes;
      for (const [i, part] of rest.entries()) {
        bytes += this.sql.exec<{ b: number }>("INSERT INTO atropos_parts (id, part, payload) VALUES (?, ?, ?) RETURNING octet_length(payload) AS b", row.id, i + 1, part).one().b;
      }
      this.sql.exec("UPDATE atropos_groups SET bytes = ? WHERE id = ?", bytes, row.id);
      row.bytes = bytes;
    }
    if (place === "queue") this.count(env, size, 1);
    return row;
  }

  /** The env's buffered groups, oldest first. */
  buffered(env: string): { id: number; size: number }[] {
    return this.sql.exec<{ id: number; size: number }>("SELECT id, size FROM atropos_groups WHERE place = 'buffer' AND env = ? ORDER BY id", env).toArray();
  }

  /** Moves a buffered group to the queue's end: a new id, as Atropos appends it to its queue; returns that id. */
  enqueueBuffered(id: number): number {
    const row = this.sql
      .exec<{ id: number; env: string; size: number }>(
        "INSERT INTO atropos_groups (env, size, place, payload, parts, bytes) SELECT env, size, 'queue', payload, parts, bytes FROM atropos_groups WHERE id = ? RETURNING id, env, size",
        id,
      )
      .one();
    // Its parts go with it, before its old row's delete would take them.
    this.sql.exec("UPDATE atropos_parts SET id = ? WHERE id = ?", row.id, id);
    this.sql.exec("DELETE FROM atropos_groups WHERE id = ?", id);
    this.count(row.env, row.size, 1);
    return row.id;
  }

  latestPayload(id: number): string | null {
    const row = this.sql.exec<PayloadRow>("SELECT id, payload, parts FROM atropos_groups WHERE id = ?", id).toArray()[0];
    return row === undefined ? null : this.whole(row);
  }

  /** A group's JSON: its row's, and its parts' after it. */
  private whole(row: PayloadRow): string {
    if (row.parts === 0) return row.payload;
    const parts = this.sql.exec<{ payload: string }>("SELECT payload FROM atropos_parts WHERE id = ? ORDER BY part", row.id).toArray();
    return row.payload + parts.map((p) => p.payload).join("");
  }

  /** The bytes of row `id` if it is kept only as the latest example (the row setLatest frees), else null. */
  latestOnlyBytes(id: number): number | null {
    return this.sql.exec<{ bytes: number }>("SELECT bytes FROM atropos_groups WHERE id = ? AND place = 'latest'", id).toArray()[0]?.bytes ?? null;
  }

  /** The row `id` is the latest example now; the previous one goes if nothing else holds it. Returns the bytes freed. */
  setLatest(previous: number | null): number {
    if (previous === null) return 0;
    return this.freed(this.sql.exec<{ bytes: number }>("DELETE FROM atropos_groups WHERE id = ? AND place = 'latest' RETURNING bytes", previous));
  }

  /** Puts queued groups larger than `batchSize` aside; returns how many. */
  holdLargerThan(batchSize: number): number {
    // From the counts: a GROUP BY over the groups themselves walks the whole queue's index.
    const rows = this.sql.exec<{ env: string; size: number; n: number }>("SELECT env, size, n FROM atropos_counts WHERE size > ?", batchSize).toArray();
    if (rows.length === 0) return 0;
    this.sql.exec("UPDATE atropos_groups SET place = 'held' WHERE place = 'queue' AND size > ?", batchSize);
    for (const r of rows) this.count(r.env, r.size, -r.n);
    return rows.reduce((a, r) => a + r.n, 0);
  }

  /** Marks `ids` (in order) as batch `batch`. */
  cut(batch: number, ids: number[]): void {
    this.sql.exec("UPDATE atropos_groups SET place = 'batch', batch = ?, pos = j.key FROM json_each(?) AS j WHERE atropos_groups.id = j.value", batch, JSON.stringify(ids));
    const counts = this.sql
      .exec<{ env: string; size: number; n: number }>("SELECT env, size, COUNT(*) AS n FROM atropos_groups WHERE place = 'batch' AND batch = ? GROUP BY env, size", batch)
      .toArray();
    for (const c of counts) this.count(c.env, c.size, -c.n);
  }

  /**
   * Takes the newest cut batch for its answer, which is streamed (a batch of long sequences is
   * larger than a Worker's memory or an RPC value may be): its rows stay, renumbered
   * -(batch + 1), until `dropTaken` once the answer is sent. Null if no batch is cut.
   */
  takeBatch(): { taken: number; n: number } | null {
    const batch = this.sql.exec<{ b: number | null }>("SELECT MAX(batch) AS b FROM atropos_groups WHERE place = 'batch' AND batch >= 0").one().b;
    if (batch === null) return null;
    // Counted, not read from rowsWritten: that counts the index's writes too.
    const n = this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM atropos_groups WHERE place = 'batch' AND batch = ?", batch).one().n;
    this.sql.exec("UPDATE atropos_groups SET batch = ? WHERE place = 'batch' AND batch = ?", -batch - 1, batch);
    return { taken: -batch - 1, n };
  }

  /** A taken batch's payloads from position `from` on, in order, until about `bytes` characters are read. */
  takenPayloads(taken: number, from: number, bytes: number): { pos: number; payload: string }[] {
    const out: { pos: number; payload: string }[] = [];
    let size = 0;
    for (const r of this.sql.exec<PayloadRow & { pos: number }>("SELECT id, pos, payload, parts FROM atropos_groups WHERE place = 'batch' AND batch = ? AND pos >= ? ORDER BY pos", taken, from)) {
      const payload = this.whole(r);
      out.push({ pos: r.pos, payload });
      size += payload.length;
      if (size >= bytes) break;
    }
    return out;
  }

  /** A taken batch's rows go, but the latest example's, which is kept as that alone. Returns the bytes freed. */
  dropTaken(taken: number, latest: number | null): number {
    const bytes = this.freed(
      this.sql.exec<{ bytes: number }>("DELETE FROM atropos_groups WHERE place = 'batch' AND batch = ? AND id IS NOT ? RETURNING bytes", taken, latest),
    );
    if (latest !== null) this.sql.exec("UPDATE atropos_groups SET place = 'latest', batch = NULL, pos = NULL WHERE id = ? AND place = 'batch' AND batch = ?", latest, taken);
    return bytes;
  }

  /** Taken batches whose answer is not being sent (its reader went, or the object restarted): their rows go. Returns the bytes freed. */
  dropAbandoned(sending: ReadonlySet<number>, latest: number | null): number {
    let bytes = 0;
    for (const { b } of this.sql.exec<{ b: number }>("SELECT DISTINCT batch AS b FROM atropos_groups WHERE place = 'batch' AND batch < 0").toArray()) {
      if (!sending.has(b)) bytes += this.dropTaken(b, latest);
    }
    return bytes;
  }

  /** /reset_data: every group goes but the latest example's and those of batches being sent (already handed out). Returns the bytes freed. */
  clear(latest: number | null): number {
    const bytes = this.freed(
      this.sql.exec<{ bytes: number }>("DELETE FROM atropos_groups WHERE id IS NOT ? AND NOT (place = 'batch' AND batch < 0) RETURNING bytes", latest),
    );
    if (latest !== null) this.sql.exec("UPDATE atropos_groups SET place = 'latest', batch = NULL, pos = NULL WHERE id = ? AND NOT (place = 'batch' AND batch < 0)", latest);
    this.sql.exec("DELETE FROM atropos_counts");
    this.sql.exec("DELETE FROM atropos_envs");
    return bytes;
  }

  /** Groups set aside, per size. */
  held(): { size: number; n: number }[] {
    return this.sql.exec<{ size: number; n: number }>("SELECT size, COUNT(*) AS n FROM atropos_groups WHERE place = 'held' GROUP BY size ORDER BY size").toArray();
  }

  /** Buffered groups per (env, size): one pass over the buffer, which /status's stalls read (atropos-stalls.ts). */
  bufferedClasses(): { env: string; size: number; n: number }[] {
    return this.sql
      .exec<{ env: string; size: number; n: number }>("SELECT env, size, COUNT(*) AS n FROM atropos_groups WHERE place = 'buffer' GROUP BY env, size ORDER BY env, size")
      .toArray();
  }

  // ------------------------------------------------------------ the queue's index (atropos-packing.ts)

  classes(): { env: string; size: number; n: number }[] {
    return this.sql.exec<{ env: string; size: number; n: number }>("SELECT env, size, n FROM atropos_counts").toArray();
  }

  read(size: number, env: string | undefined, after: number, limit: number): number[] {
    const rows =
      env === undefined
        ? this.sql.exec<{ id: number }>("SELECT id FROM atropos_groups WHERE place = 'queue' AND size = ? AND id > ? ORDER BY id LIMIT ?", size, after, limit)
        : this.sql.exec<{ id: number }>("SELECT id FROM atropos_groups WHERE place = 'queue' AND env = ? AND size = ? AND id > ? ORDER BY id LIMIT ?", env, size, after, limit);
    return rows.toArray().map((r) => r.id);
  }

  /** The bytes of the rows a DELETE ... RETURNING bytes removed. */
  private freed(rows: Iterable<{ bytes: number }>): number {
    let bytes = 0;
    for (const r of rows) bytes += r.bytes;
    return bytes;
  }

  /**
   * A class whose count reaches 0 loses its row, so that the table holds only classes with
   * something queued: classes() and holdLargerThan read all of it, on every cut and /status, and
   * would otherwise grow with every (env, size) ever queued. RETURNING tells the upsert's result
   * without another read.
   */
  private count(env: string, size: number, delta: number): void {
    const n = this.sql.exec<{ n: number }>("INSERT INTO atropos_counts (env, size, n) VALUES (?, ?, ?) ON CONFLICT (env, size) DO UPDATE SET n = n + excluded.n RETURNING n", env, size, delta).one().n;
    if (n === 0) this.sql.exec("DELETE FROM atropos_counts WHERE env = ? AND size = ?", env, size);
  }
}
