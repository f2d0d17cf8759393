/**
 * The runs an engine's history is divided into (protocol/history.ts): one row per run in
 * `history_runs`, the current one in meta.run. When runs begin is decided by the status machine
 * (status-and-rewards.ts, with the rule in rules.ts); this holds them and shows them. A run's
 * figures are read from its reward history through the (run, seq) index, never a scan.
 */
import type { HistoryRun, HistoryRunsQuery, HistoryRunsResponse, RunBeginning } from "../protocol/history";
import type { RewardHistoryResponse } from "../protocol/swarm";
import type { EngineStore } from "./engine-store";

/** Notes that a buffer group began in `run`, for good (holdsAnything): one lookup, a write only the first time. */
export function noteGroupIn(sql: SqlStorage, run: number): void {
  sql.exec("UPDATE history_runs SET held_groups = 1 WHERE run = ? AND held_groups = 0", run);
}

type RunRow = { run: number; started_at: number; began: RunBeginning; training_run_id: string | null; note: string };

export class HistoryRuns {
  constructor(private readonly store: EngineStore) {}

  /** Adds run `current + 1` and makes it the current one; returns its number. */
  add(began: RunBeginning, startedAt: number, trainingRunId: string | null, note: string): number {
    const run = (this.store.sql.exec<{ m: number | null }>("SELECT MAX(run) AS m FROM history_runs").one().m ?? 0) + 1;
    this.store.sql.exec("INSERT INTO history_runs (run, started_at, began, training_run_id, note) VALUES (?, ?, ?, ?, ?)", run, startedAt, began, trainingRunId, note);
    return run;
  }

  /** A run that has nothing in it yet takes what a beginning said of it rather than a run of its own. */
  amend(run: number, trainingRunId: string | null, note: string): void {
    if (trainingRunId !== null) this.store.sql.exec("UPDATE history_runs SET began = 'training_run', training_run_id = ? WHERE run = ?", trainingRunId, run);
    if (note !== "") this.store.sql.exec("UPDATE history_runs SET note = ? WHERE run = ?", note, run);
  }

  /**
   * Whether the run has reward history entries or had buffer groups (its accumulator is the status
   * machine's to judge): an engine fed only through the rollout buffer writes no reward history,
   * and forgets its decided groups after a week.
   */
  holdsAnything(run: number): boolean {
    return this.store.sql.exec("SELECT 1 FROM reward_history WHERE run = ?1 UNION ALL SELECT 1 FROM history_runs WHERE run = ?1 AND held_groups = 1 LIMIT 1", run).toArray().length > 0;
  }

  exists(run: number): boolean {
    return this.store.sql.exec("SELECT 1 FROM history_runs WHERE run = ?", run).toArray().length > 0;
  }

  /** `unwritten` counts the current step's rewards, which the current run's episodes include. */
  list(q: HistoryRunsQuery, unwritten: () => number): HistoryRunsResponse {
    const current = this.store.meta.run;
    const rows = this.store.sql
      .exec<RunRow>(
        "SELECT run, started_at, began, training_run_id, note FROM history_runs WHERE run < ? ORDER BY run DESC LIMIT ?",
        q.before ?? Number.MAX_SAFE_INTEGER,
        q.limit,
      )
      .toArray();
    return { current_run: current === 0 ? null : current, runs: rows.map((r) => this.view(r, current, r.run === current ? unwritten() : 0)) };
  }

  history(run: number): RewardHistoryResponse["history"] {
    return this.store.sql
      .exec<{ global_step: number; mean_reward: number; std_reward: number; timestamp: number; count: number; min_reward: number; max_reward: number }>(
        "SELECT global_step, mean_reward, std_reward, timestamp, count, min_reward, max_reward FROM reward_history WHERE run = ? ORDER BY seq",
        run,
      )
      .toArray();
  }

  private view(r: RunRow, current: number, unwritten: number): HistoryRun {
    const sql = this.store.sql;
    const agg = sql
      .exec<{ steps: number; episodes: number | null; first_step: number | null; last_step: number | null }>(
        "SELECT COUNT(*) AS steps, SUM(episodes) AS episodes, MIN(global_step) AS first_step, MAX(global_step) AS last_step FROM reward_history WHERE run = ?",
        r.run,
      )
      .one();
    const last = sql.exec<{ mean_reward: number }>("SELECT mean_reward FROM reward_history WHERE run = ? ORDER BY seq DESC LIMIT 1", r.run).toArray()[0];
    return {
      run: r.run,
      current: r.run === current,
      started_at: r.started_at / 1000,
      began: r.began,
      training_run_id: r.training_run_id,
      note: r.note,
      steps: agg.steps,
      episodes: (agg.episodes ?? 0) + unwritten,
      first_step: agg.first_step,
      last_step: agg.last_step,
      last_mean_reward: last?.mean_reward ?? null,
    };
  }
}
