/**
 * For tests of one engine migration on an engine that has them all: sets the schema version
 * back to just before migration `next` and undoes what the later migrations added that cannot
 * be run twice (an ALTER TABLE ADD COLUMN), so that migrateEngine runs `next` and every one after
 * it again. A migration appended that cannot run twice adds its undoing here.
 */
export function rewindSchema(sql: SqlStorage, next: number): void {
  // 31: buf_sessions.min_weight_version.
  if (next <= 31) sql.exec("ALTER TABLE buf_sessions DROP COLUMN min_weight_version");
  // 30: only fills kv's retention_uses and ledger_sweep_at where they were missing; nothing to undo.
  // 29: only fills ends_before_sync.ended_at where 27 left it 0; nothing to undo.
  // 28: only fills outbox.created_at where 19 left it null; nothing to undo.
  // 27: ends_before_sync.delivery_detail and .ended_at.
  if (next <= 27) sql.exec("ALTER TABLE ends_before_sync DROP COLUMN delivery_detail; ALTER TABLE ends_before_sync DROP COLUMN ended_at");
  // 26: atropos_groups.parts and .bytes, atropos_parts and its trigger.
  if (next <= 26) sql.exec("DROP TRIGGER atropos_parts_go; DROP TABLE atropos_parts; ALTER TABLE atropos_groups DROP COLUMN parts; ALTER TABLE atropos_groups DROP COLUMN bytes");
  // 25: reward_history.episodes (unless the test of migration 6 rebuilt the table without it).
  if (next <= 25 && sql.exec("SELECT 1 FROM pragma_table_info('reward_history') WHERE name = 'episodes'").toArray().length > 0) {
    sql.exec("ALTER TABLE reward_history DROP COLUMN episodes");
  }
  // 24: history_runs.held_groups (unless the table is gone: the test of migration 6 drops it).
  if (next <= 24 && sql.exec("SELECT 1 FROM pragma_table_info('history_runs') WHERE name = 'held_groups'").toArray().length > 0) {
    sql.exec("ALTER TABLE history_runs DROP COLUMN held_groups");
  }
  // 21: buf_steps.response_escaped.
  if (next <= 21) sql.exec("ALTER TABLE buf_steps DROP COLUMN response_escaped");
  // 20: the aborts table.
  if (next <= 20) sql.exec("DROP TABLE aborts");
  // 19: outbox.created_at and outbox.failed_at.
  if (next <= 19) sql.exec("ALTER TABLE outbox DROP COLUMN created_at; ALTER TABLE outbox DROP COLUMN failed_at");
  // 18: commands.expires_at and its index.
  if (next <= 18) sql.exec("DROP INDEX commands_expiring; ALTER TABLE commands DROP COLUMN expires_at");
  // 17: episodes.claimed_by.
  if (next <= 17) sql.exec("ALTER TABLE episodes DROP COLUMN claimed_by");
  sql.exec("UPDATE kv SET v = ? WHERE k = 'schema_version'", JSON.stringify(next - 1));
}
