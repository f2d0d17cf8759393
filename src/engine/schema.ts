/**
 * The engine's own SQLite schema, created in the Durable Object's constructor.
 * The partial indexes keep the hot paths O(log n): the FIFO head, the earliest lease,
 * the earliest due command and outbox row are each one index probe, never a scan.
 */

/**
 * Shared by the first schema (ENGINE_DDL) and migration 3, which rebuilds these tables with
 * another key: the same text in both, so the copied rows land in the same columns.
 */
const EPISODES_COLUMNS = `
  episode_uuid TEXT PRIMARY KEY,
  state TEXT NOT NULL CHECK (state IN ('registered', 'claimed', 'resetting')),
  queue_seq INTEGER,
  openai_base_url TEXT NOT NULL,
  openai_api_key TEXT NOT NULL,
  zmq_addr TEXT NOT NULL,
  episode_type TEXT NOT NULL DEFAULT 'train',
  client_uuid TEXT NOT NULL DEFAULT '',
  fence INTEGER NOT NULL DEFAULT 0,
  last_activity INTEGER NOT NULL,
  discard_timeout REAL NOT NULL DEFAULT -1,
  expires_at INTEGER,
  llm_call_count INTEGER NOT NULL DEFAULT 0,
  task_id TEXT NOT NULL DEFAULT ''`;
const EPISODES_INDEXES = `
CREATE INDEX IF NOT EXISTS episodes_queue ON episodes (queue_seq) WHERE state = 'registered';
CREATE INDEX IF NOT EXISTS episodes_lease ON episodes (expires_at) WHERE state = 'claimed';
CREATE INDEX IF NOT EXISTS episodes_resetting ON episodes (episode_uuid) WHERE state = 'resetting';`;
const OUTBOX_COLUMNS = `
  kind TEXT NOT NULL,
  payload TEXT NOT NULL,
  next_attempt_at INTEGER NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT ''`;
const OUTBOX_INDEX = "CREATE INDEX IF NOT EXISTS outbox_due ON outbox (next_attempt_at);";

export const ENGINE_DDL = `
CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (hash TEXT PRIMARY KEY, id TEXT NOT NULL UNIQUE, role TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS episodes (${EPISODES_COLUMNS}
);
${EPISODES_INDEXES}
CREATE TABLE IF NOT EXISTS finished (
  episode_uuid TEXT NOT NULL,
  fence INTEGER NOT NULL,
  client_uuid TEXT NOT NULL,
  task_id TEXT NOT NULL,
  episode_type TEXT NOT NULL,
  ended_at INTEGER NOT NULL,
  delivery TEXT NOT NULL CHECK (delivery IN ('none', 'pending', 'delivered', 'undeliverable')),
  delivery_detail TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (episode_uuid, fence)
);
CREATE TABLE IF NOT EXISTS commands (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  body TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  visible_at INTEGER NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  acked_at INTEGER,
  ok INTEGER,
  detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS commands_due ON commands (visible_at, seq) WHERE acked_at IS NULL;
CREATE TABLE IF NOT EXISTS outbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT,${OUTBOX_COLUMNS}
);
${OUTBOX_INDEX}
CREATE TABLE IF NOT EXISTS reward_history (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  global_step INTEGER NOT NULL,
  mean_reward REAL NOT NULL,
  std_reward REAL NOT NULL,
  count INTEGER NOT NULL,
  min_reward REAL NOT NULL,
  max_reward REAL NOT NULL,
  timestamp REAL NOT NULL
);
`;

/** The rollout buffer's tables (rollout-buffer.ts), as its first version created them. */
export const BUFFER_DDL = `
CREATE TABLE IF NOT EXISTS buf_groups (
  group_id TEXT PRIMARY KEY,
  state TEXT NOT NULL CHECK (state IN ('pending', 'ready', 'delivered', 'dropped')),
  completed_sessions INTEGER NOT NULL DEFAULT 0,
  min_weight_version INTEGER,
  last_row_at INTEGER NOT NULL,
  ready_seq INTEGER,
  pull_cursor INTEGER,
  stale INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS buf_groups_ready ON buf_groups (ready_seq) WHERE state = 'ready';
CREATE INDEX IF NOT EXISTS buf_groups_ttl ON buf_groups (last_row_at) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS buf_groups_pull ON buf_groups (pull_cursor) WHERE pull_cursor IS NOT NULL;
CREATE TABLE IF NOT EXISTS buf_sessions (
  session_id TEXT PRIMARY KEY,
  group_id TEXT NOT NULL,
  completed INTEGER NOT NULL DEFAULT 0,
  terminal_reward REAL
);
CREATE INDEX IF NOT EXISTS buf_sessions_group ON buf_sessions (group_id);
CREATE TABLE IF NOT EXISTS buf_steps (
  pk INTEGER PRIMARY KEY AUTOINCREMENT,
  uid TEXT NOT NULL,
  session_id TEXT NOT NULL,
  step_index INTEGER NOT NULL,
  group_id TEXT NOT NULL,
  messages TEXT NOT NULL,
  response TEXT NOT NULL,
  reward REAL NOT NULL,
  truncated INTEGER NOT NULL,
  is_session_completed INTEGER NOT NULL,
  weight_version INTEGER NOT NULL,
  extra TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  UNIQUE (session_id, step_index)
);
CREATE INDEX IF NOT EXISTS buf_steps_group ON buf_steps (group_id, session_id, step_index);
CREATE TABLE IF NOT EXISTS buf_pulls (cursor INTEGER PRIMARY KEY AUTOINCREMENT, created_at INTEGER NOT NULL, group_ids TEXT NOT NULL);
`;

/**
 * Changes to an existing engine's tables, applied once each in order, after ENGINE_DDL and
 * BUFFER_DDL. The version reached is kept in kv (`schema_version`); fresh engines run them too,
 * so those two stay the first version's schema and the current one is they plus these.
 */
export const ENGINE_MIGRATIONS: readonly string[] = [
  // 1: finished episodes remember their global step and reward, for per-step task views.
  "ALTER TABLE finished ADD COLUMN global_step INTEGER; ALTER TABLE finished ADD COLUMN reward REAL;",
  // 2: which agent session leased a command, so a newer session can take over its leases.
  "ALTER TABLE commands ADD COLUMN leased_by TEXT;",
  // 3: fewer B-trees on the hot path, so fewer pages for each commit to write. episodes and
  // finished were rowid tables with a separate index for their text key; keyed by it directly
  // (WITHOUT ROWID) they are one B-tree each. outbox ids lose AUTOINCREMENT, which wrote the
  // sqlite_sequence table on every insert: an outbox id only orders and names pending rows, and
  // a new one is still above every pending one. Per claim/end/register cycle under load: 17.4
  // -> 13.5 WAL frames written (BENCHMARKS.md, session 9).
  `CREATE TABLE episodes_v3 (${EPISODES_COLUMNS}
   ) WITHOUT ROWID;
   INSERT INTO episodes_v3 SELECT * FROM episodes;
   DROP TABLE episodes;
   ALTER TABLE episodes_v3 RENAME TO episodes;
   ${EPISODES_INDEXES}
   CREATE TABLE finished_v3 (
     episode_uuid TEXT NOT NULL,
     fence INTEGER NOT NULL,
     client_uuid TEXT NOT NULL,
     task_id TEXT NOT NULL,
     episode_type TEXT NOT NULL,
     ended_at INTEGER NOT NULL,
     delivery TEXT NOT NULL CHECK (delivery IN ('none', 'pending', 'delivered', 'undeliverable')),
     delivery_detail TEXT NOT NULL DEFAULT '',
     global_step INTEGER,
     reward REAL,
     PRIMARY KEY (episode_uuid, fence)
   ) WITHOUT ROWID;
   INSERT INTO finished_v3 (episode_uuid, fence, client_uuid, task_id, episode_type, ended_at, delivery, delivery_detail, global_step, reward)
     SELECT episode_uuid, fence, client_uuid, task_id, episode_type, ended_at, delivery, delivery_detail, global_step, reward FROM finished;
   DROP TABLE finished;
   ALTER TABLE finished_v3 RENAME TO finished;
   CREATE TABLE outbox_v3 (
     id INTEGER PRIMARY KEY,${OUTBOX_COLUMNS}
   );
   INSERT INTO outbox_v3 SELECT * FROM outbox;
   DROP TABLE outbox;
   ALTER TABLE outbox_v3 RENAME TO outbox;
   ${OUTBOX_INDEX}`,
  // 4: the reward accumulator of the current step is read from the finished rows that count
  // toward it (acc_epoch is the meta's accEpoch when the row was written; null for rows that
  // carry no train reward) instead of being rewritten in kv on every end: one statement and
  // one page fewer per end. reward_values keeps a list reward whole (reward is its mean).
  // Rows written before this have no epoch: what they added is in the meta's accumulator.
  "ALTER TABLE finished ADD COLUMN acc_epoch INTEGER; ALTER TABLE finished ADD COLUMN reward_values TEXT;",
  // 5: a session belongs to one group for good, and a retried row is told from a late one, also
  // once its group's steps are gone: buf_sessions rows outlive the steps (until
  // sessions_expire_at, set when the group's steps go) and remember the highest step stored.
  // Sessions whose steps were already gone have none (NULL): their rows count as late, as before.
  `ALTER TABLE buf_sessions ADD COLUMN max_step INTEGER;
   UPDATE buf_sessions SET max_step = (SELECT MAX(step_index) FROM buf_steps WHERE buf_steps.session_id = buf_sessions.session_id);
   ALTER TABLE buf_groups ADD COLUMN sessions_expire_at INTEGER;
   CREATE INDEX IF NOT EXISTS buf_groups_sessions_expire ON buf_groups (sessions_expire_at) WHERE sessions_expire_at IS NOT NULL;`,
  // 6: the history is divided into runs (history-runs.ts). Every reward history entry, finished
  // episode and buffer group carries its run; what an engine holds from before this becomes one earlier run
  // (run 1), which stays the current one (meta.run) until the next run begins.
  // reward_history is rebuilt rather than altered, which also holds when it has the column already.
  `CREATE TABLE IF NOT EXISTS history_runs (
     run INTEGER PRIMARY KEY,
     started_at INTEGER NOT NULL,
     began TEXT NOT NULL,
     training_run_id TEXT,
     note TEXT NOT NULL DEFAULT ''
   );
   CREATE TABLE reward_history_v6 (
     seq INTEGER PRIMARY KEY AUTOINCREMENT,
     run INTEGER NOT NULL,
     global_step INTEGER NOT NULL,
     mean_reward REAL NOT NULL,
     std_reward REAL NOT NULL,
     count INTEGER NOT NULL,
     min_reward REAL NOT NULL,
     max_reward REAL NOT NULL,
     timestamp REAL NOT NULL
   );
   INSERT INTO reward_history_v6 (seq, run, global_step, mean_reward, std_reward, count, min_reward, max_reward, timestamp)
     SELECT seq, 1, global_step, mean_reward, std_reward, count, min_reward, max_reward, timestamp FROM reward_history;
   DROP TABLE reward_history;
   ALTER TABLE reward_history_v6 RENAME TO reward_history;
   CREATE INDEX reward_history_run ON reward_history (run, seq);
   ALTER TABLE buf_groups ADD COLUMN run INTEGER NOT NULL DEFAULT 1;
   ALTER TABLE finished ADD COLUMN run INTEGER NOT NULL DEFAULT 1;
   INSERT OR IGNORE INTO history_runs (run, started_at, began)
     SELECT 1, COALESCE((SELECT CAST(MIN(timestamp) * 1000 AS INTEGER) FROM reward_history), (SELECT MIN(ended_at) FROM finished), 0), 'earlier'
     WHERE EXISTS (SELECT 1 FROM kv WHERE k = 'meta' AND json_extract(v, '$.name') IS NOT NULL);
   UPDATE kv SET v = json_set(v, '$.run', 1) WHERE k = 'meta' AND EXISTS (SELECT 1 FROM history_runs);`,
  // 7: a decided group's row goes with its sessions (SESSION_MEMORY_MS, 7 days, after its steps
  // went). Decided groups with neither a kept pull nor a deadline (their sessions forgotten
  // before rows went with them, or decided before migration 5) get one, 7 days after their last
  // row, so the alarm removes them in its batches rather than this migration at once.
  `UPDATE buf_groups SET sessions_expire_at = last_row_at + 604800000
     WHERE state IN ('delivered', 'dropped') AND pull_cursor IS NULL AND sessions_expire_at IS NULL;`,
  // 8: failures that are not the policy's, and staleness as consumption lag. A buffer session
  // may be failed (failed_infra: kept, counted, never usable); a group counts its failed
  // sessions, may be delivered partial at its TTL, and remembers when it began and became
  // ready. A pull keeps its per-group report, so that reading it again gives it unchanged.
  // An AgentJet claim remembers the weight version it was claimed at; a failed_infra end is
  // marked in finished, and failed_rollouts holds every failed claim (failed_infra, aborted,
  // reaped) of the rolling phase, for the pool's per-task view. Existing groups began at their
  // last row, which is what they knew.
  `ALTER TABLE buf_sessions ADD COLUMN failed INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE buf_groups ADD COLUMN failed_sessions INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE buf_groups ADD COLUMN partial INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE buf_groups ADD COLUMN first_row_at INTEGER;
   ALTER TABLE buf_groups ADD COLUMN ready_at INTEGER;
   UPDATE buf_groups SET first_row_at = last_row_at;
   ALTER TABLE buf_pulls ADD COLUMN report TEXT;
   ALTER TABLE episodes ADD COLUMN claim_weight_version INTEGER;
   ALTER TABLE finished ADD COLUMN failed INTEGER NOT NULL DEFAULT 0;
   CREATE TABLE IF NOT EXISTS failed_rollouts (
     episode_uuid TEXT NOT NULL,
     fence INTEGER NOT NULL,
     client_uuid TEXT NOT NULL,
     task_id TEXT NOT NULL,
     reason TEXT NOT NULL CHECK (reason IN ('failed_infra', 'aborted', 'reaped')),
     global_step INTEGER,
     run INTEGER NOT NULL,
     at INTEGER NOT NULL,
     PRIMARY KEY (episode_uuid, fence)
   ) WITHOUT ROWID;`,
  // 9: the Atropos trajectory API (atropos-hub.ts): its environments, its scored groups (queued,
  // buffered, set aside, cut into batches, or kept as the latest example), and the count of
  // queued groups per (env, size) that batch cutting reads instead of the queue.
  `CREATE TABLE IF NOT EXISTS atropos_envs (
     env_id INTEGER PRIMARY KEY,
     desired_name TEXT NOT NULL,
     real_name TEXT NOT NULL,
     max_context_len INTEGER NOT NULL,
     weight REAL NOT NULL,
     group_size INTEGER NOT NULL,
     min_batch_allocation REAL,
     connected INTEGER NOT NULL,
     last_update REAL NOT NULL
   );
   CREATE TABLE IF NOT EXISTS atropos_groups (
     id INTEGER PRIMARY KEY AUTOINCREMENT,
     env TEXT NOT NULL,
     size INTEGER NOT NULL,
     place TEXT NOT NULL CHECK (place IN ('queue', 'buffer', 'held', 'batch', 'latest')),
     batch INTEGER,
     pos INTEGER,
     payload TEXT NOT NULL
   );
   CREATE INDEX IF NOT EXISTS atropos_queue_size ON atropos_groups (size, id) WHERE place = 'queue';
   CREATE INDEX IF NOT EXISTS atropos_queue_env ON atropos_groups (env, size, id) WHERE place = 'queue';
   CREATE INDEX IF NOT EXISTS atropos_buffer ON atropos_groups (env, id) WHERE place = 'buffer';
   CREATE INDEX IF NOT EXISTS atropos_cut ON atropos_groups (batch, pos) WHERE place = 'batch';
   CREATE INDEX IF NOT EXISTS atropos_held ON atropos_groups (size) WHERE place = 'held';
   CREATE TABLE IF NOT EXISTS atropos_counts (env TEXT NOT NULL, size INTEGER NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (env, size)) WITHOUT ROWID;`,
  // 10: acked commands are deleted a while after their ack (command-queue.ts): the alarm finds
  // the oldest ones, and when the next is due, by this index rather than by reading every
  // command's row (a deliver command's body spans many pages).
  "CREATE INDEX IF NOT EXISTS commands_acked ON commands (acked_at) WHERE acked_at IS NOT NULL;",
  // 11: the ends a weight sync that keeps claims takes out of the batch (episode-queue.ts
  // clearFinished) are remembered apart from finished, which the pool view reads: so that an
  // end sent again during or after the sync is still answered as the repeat it is, and a result
  // still on its way to its runner still counts as claimed. Kept a while (cleared_at), and while
  // their delivery is pending; a full clear takes them all.
  `CREATE TABLE IF NOT EXISTS ends_before_sync (
     episode_uuid TEXT NOT NULL,
     fence INTEGER NOT NULL,
     client_uuid TEXT NOT NULL,
     delivery TEXT NOT NULL,
     cleared_at INTEGER NOT NULL,
     PRIMARY KEY (episode_uuid, fence)
   ) WITHOUT ROWID;
   CREATE INDEX IF NOT EXISTS ends_before_sync_cleared ON ends_before_sync (cleared_at);`,
  // 12: a registration that arrives while its episode waits for its runner's reset takes effect
  // (episode-queue.ts register): its URL, key and address are written at once, and this marks
  // the row so that a failed reset of the old runner no longer deletes the episode.
  "ALTER TABLE episodes ADD COLUMN registered_again INTEGER NOT NULL DEFAULT 0;",
  // 13: an AgentJet task comes back (the next batch, the next epoch, a registration again) after
  // its group was decided: its rollouts start the task's next group (task-groups.ts) instead of
  // being ignored as late rows of the old one. Each task remembers the group it joins now and
  // its generation; a row goes with that group's memory (SESSION_MEMORY_MS). Tasks with no row
  // start at their own id, as before.
  `CREATE TABLE IF NOT EXISTS buf_task_groups (
     task_id TEXT PRIMARY KEY,
     group_id TEXT NOT NULL,
     generation INTEGER NOT NULL
   ) WITHOUT ROWID;
   CREATE INDEX IF NOT EXISTS buf_task_groups_group ON buf_task_groups (group_id);`,
  // 14: a finished claim keeps the weight version it was claimed at, so that pace counts the
  // rollouts begun at the trainer's current version that ended and have not been consumed, when
  // no buffer shows what the trainer consumed (episode-claims.ts paced). Ends written before
  // this have none and are not counted: the engine did not count them either.
  "ALTER TABLE finished ADD COLUMN claim_weight_version INTEGER;",
  // 15: an Atropos class's count row goes when its count reaches 0 (atropos-store.ts count), so
  // that the reads of every class (each cut, /status, the overview) cost what is queued, not
  // every (env, size) ever seen; the rows left at 0 before that go here.
  "DELETE FROM atropos_counts WHERE n = 0;",
  // 16: the buffer's byte counters (buffer-bytes.ts) were counted from the table by whichever
  // reader came first, so every reader had to count or know one had; an engine that has not
  // counted them yet counts them here, once, and the counters are always there after. Counted
  // with the counters' own figure for a row, or they would drift from what the deletes subtract.
  // An empty buffer needs no entry (the counters start at 0), and an engine deleted and made
  // empty again must have none.
  `INSERT INTO kv (k, v) SELECT 'buffer_counters', '{}' WHERE EXISTS (SELECT 1 FROM buf_steps) ON CONFLICT (k) DO NOTHING;
   UPDATE kv SET v = json_set(v,
       '$.storedBytes', COALESCE(json_extract(v, '$.storedBytes'), (SELECT COALESCE(SUM(length(CAST(messages AS BLOB)) + length(CAST(response AS BLOB)) + length(CAST(extra AS BLOB))), 0) FROM buf_steps)),
       '$.keptBytes', COALESCE(json_extract(v, '$.keptBytes'),
         (SELECT COALESCE(SUM(length(CAST(messages AS BLOB)) + length(CAST(response AS BLOB)) + length(CAST(extra AS BLOB))), 0) FROM buf_steps WHERE group_id IN (SELECT group_id FROM buf_groups WHERE state = 'delivered'))))
     WHERE k = 'buffer_counters';`,
  // 17: a claim remembers the hash of the engine token that made it (NULL: the admin's, or a
  // claim made before this), so that revoking that token releases its live claims
  // (Episodes.releaseClaimsOf). No index: a revocation reads the claimed rows through the lease
  // index, and the hot claim path writes no extra B-tree.
  "ALTER TABLE episodes ADD COLUMN claimed_by TEXT;",
  // 18: a command that only advises (clear_sessions) expires unacked (command-queue.ts
  // ADVISORY_KEEP_MS): an engine no agent polls (a buffer-only one) kept one per dropped group
  // for ever. Those queued before this expire a day after they were made.
  `ALTER TABLE commands ADD COLUMN expires_at INTEGER;
   UPDATE commands SET expires_at = created_at + 86400000 WHERE acked_at IS NULL AND json_extract(body, '$.kind') = 'clear_sessions';
   CREATE INDEX IF NOT EXISTS commands_expiring ON commands (expires_at) WHERE acked_at IS NULL AND expires_at IS NOT NULL;`,
  // 19: the overview says how old the outbox's backlog is and when a flush last failed
  // (Outbox.view): a backlog of three rows is a batch window or a ten-minute D1 outage, and the
  // rows alone could not tell which. Rows written before this have neither.
  "ALTER TABLE outbox ADD COLUMN created_at INTEGER; ALTER TABLE outbox ADD COLUMN failed_at INTEGER;",
  // 20: an abort sent again (its answer lost, or a proxy's replay) is answered as the first was,
  // as a repeated end is, rather than 409 claim_lost: each episode's latest abort, kept while its
  // episode row is and until the batch's ends are cleared (episode-queue.ts).
  "CREATE TABLE IF NOT EXISTS aborts (episode_uuid TEXT PRIMARY KEY, fence INTEGER NOT NULL, client_uuid TEXT NOT NULL) WITHOUT ROWID;",
  // 21: a step's response with a lone surrogate (Python's json.dumps writes one as \ud800) is
  // kept as its JSON, escaped, and read back exactly: SQLite's text is UTF-8, which has no form for
  // it, and stored raw it came back as U+FFFD. Messages are JSON already.
  "ALTER TABLE buf_steps ADD COLUMN response_escaped INTEGER NOT NULL DEFAULT 0;",
  // 22: the claims whose recorded calls wait to be gathered into one R2 object each, and when
  // (ledger-compactions.ts).
  `CREATE TABLE IF NOT EXISTS ledger_compactions (
     episode_uuid TEXT NOT NULL, fence INTEGER NOT NULL, due_at INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
     PRIMARY KEY (episode_uuid, fence)) WITHOUT ROWID;
   CREATE INDEX IF NOT EXISTS ledger_compactions_due ON ledger_compactions (due_at);`,
  // 23: each episode's latest claim that did not end (aborted or reaped), kept while its ends
  // are: a fenceless end is a repeat only if its episode's latest claim is the one that ended,
  // and the episode's row, deleted or registered again, no longer says which that was.
  "CREATE TABLE IF NOT EXISTS unended_claims (episode_uuid TEXT PRIMARY KEY, fence INTEGER NOT NULL, client_uuid TEXT NOT NULL) WITHOUT ROWID;",
  // 24: a run remembers that a buffer group began in it (noteGroupIn): the group's row goes a week
  // after it is decided, and a buffer-only run, which writes no reward history, then read as empty
  // and was taken over by the next beginning.
  `ALTER TABLE history_runs ADD COLUMN held_groups INTEGER NOT NULL DEFAULT 0;
   UPDATE history_runs SET held_groups = 1 WHERE run IN (SELECT run FROM buf_groups);`,
  // 25: a step's episodes apart from its reward values (`count`): a list reward holds several
  // values, and a run's episodes were their sum. Steps written before are taken at their values.
  `ALTER TABLE reward_history ADD COLUMN episodes INTEGER NOT NULL DEFAULT 0;
   UPDATE reward_history SET episodes = count;`,
  // 26: an Atropos group's JSON past what one row holds goes on in atropos_parts (atropos-store.ts),
  // and a group's row keeps its bytes, all its parts' with its own; a group's parts go with it.
  `ALTER TABLE atropos_groups ADD COLUMN parts INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE atropos_groups ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
   UPDATE atropos_groups SET bytes = octet_length(payload);
   CREATE TABLE IF NOT EXISTS atropos_parts (id INTEGER NOT NULL, part INTEGER NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (id, part)) WITHOUT ROWID;
   CREATE TRIGGER IF NOT EXISTS atropos_parts_go AFTER DELETE ON atropos_groups WHEN OLD.parts > 0 BEGIN DELETE FROM atropos_parts WHERE id = OLD.id; END;`,
  // 27: an end a phase change took out of the batch keeps the agent's word on its delivery and
  // when it ended: a result the agent could not hand over after the trainer left ROLLING (its
  // usual timing) is counted and listed as undeliverable, not lost from every count.
  `ALTER TABLE ends_before_sync ADD COLUMN delivery_detail TEXT NOT NULL DEFAULT '';
   ALTER TABLE ends_before_sync ADD COLUMN ended_at INTEGER NOT NULL DEFAULT 0;`,
  // 28: outbox rows from before 19 that still wait for D1 get an age, from now (as ms since the
  // epoch): without one the overview showed a backlog of no age, and an alert on the oldest row's
  // age could never fire for the backlog that outlived a deploy, the likeliest to be stuck.
  "UPDATE outbox SET created_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) WHERE created_at IS NULL;",
  // 29: results a weight sync took out of the batch before 27 got ended_at 0 there, and were
  // listed as undeliverable at 1970, last: they take the time the sync cleared them, the nearest
  // after their end that is known.
  "UPDATE ends_before_sync SET ended_at = cleared_at WHERE ended_at = 0;",
  // 30: an engine from before the buffer's D1 rows were swept (retention-schedule.ts) notes a use
  // only at its next stored step: one that had used its buffer and stored none since never swept
  // the rows it wrote to D1. Its uses are read from what it holds, and a sweep is set an hour on
  // (the alarm is set again after an upgrade).
  `INSERT INTO kv (k, v) SELECT 'retention_uses',
     CASE WHEN b.used AND l.used THEN '["buffer","ledger"]' WHEN b.used THEN '["buffer"]' ELSE '["ledger"]' END
   FROM (SELECT EXISTS (SELECT 1 FROM kv WHERE k IN ('buffer_active', 'buffer_counters')) OR EXISTS (SELECT 1 FROM buf_groups) AS used) b,
        (SELECT EXISTS (SELECT 1 FROM kv WHERE k = 'ledger_sweep_at') AS used) l
   WHERE (b.used OR l.used) AND NOT EXISTS (SELECT 1 FROM kv WHERE k = 'retention_uses');
   INSERT INTO kv (k, v) SELECT 'ledger_sweep_at', CAST(CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) + 3600000 AS TEXT)
   WHERE EXISTS (SELECT 1 FROM kv WHERE k = 'retention_uses' AND v LIKE '%buffer%') AND NOT EXISTS (SELECT 1 FROM kv WHERE k = 'ledger_sweep_at');`,
  // 31: each session's oldest weight version, so that pace weighs a group by its usable
  // sessions (buffer-pace.ts), as a pull reports it, not by a failed or unfinished one's rows.
  `ALTER TABLE buf_sessions ADD COLUMN min_weight_version INTEGER;
   UPDATE buf_sessions SET min_weight_version = (SELECT MIN(weight_version) FROM buf_steps WHERE buf_steps.session_id = buf_sessions.session_id);`,
];

/** The schema version an engine's storage is at: 0 for a new one. */
export function storedSchemaVersion(sql: SqlStorage): number {
  if (sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'kv'").toArray().length === 0) return 0;
  const row = sql.exec<{ v: string }>("SELECT v FROM kv WHERE k = 'schema_version'").toArray()[0];
  return row ? Number(JSON.parse(row.v)) : 0;
}

/** Brings an engine's SQLite up to date; returns the schema version it is at. */
export function migrateEngine(sql: SqlStorage): number {
  sql.exec(ENGINE_DDL);
  sql.exec(BUFFER_DDL);
  const row = sql.exec<{ v: string }>("SELECT v FROM kv WHERE k = 'schema_version'").toArray()[0];
  let version = row ? Number(JSON.parse(row.v)) : 0;
  for (; version < ENGINE_MIGRATIONS.length; version++) sql.exec(ENGINE_MIGRATIONS[version]!);
  sql.exec("INSERT INTO kv (k, v) VALUES ('schema_version', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v", JSON.stringify(version));
  return version;
}
