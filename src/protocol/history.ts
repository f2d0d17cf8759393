/**
 * An engine's history divided into runs: one trainer's training, from its start to the next
 * start. Reward history, finished episodes (trajectories) and buffer groups carry their run, so
 * a restarted trainer's steps never merge with or overwrite an earlier run's steps of the same
 * number. `get_reward_history` answers the current run, as the seed's in-memory server did.
 */
import { z } from "zod";
import { textOfAtMost } from "./limits";

/**
 * How a run began:
 * - start_engine: an operator started the trainer (`/start_engine`);
 * - training_run: a training run of the runs API started (its id is the run's training_run_id);
 * - operator: an operator said so (`POST /history/begin_run`);
 * - trainer_started: the engine left ENGINE.OFFLINE (a trainer started, or came back after stopping);
 * - trainer_booted: the trainer went back to ENGINE.BOOTING without stopping (it restarted);
 * - step_backwards: the trainer's global_step went backwards (restarted outside the exchange);
 * - step_appeared: a global_step was reported on an engine that had been rolling without one
 *   (a load generator before a trainer): the step-less episodes stay in the run before;
 * - earlier: the history from before runs were kept apart, as one run.
 */
export const RUN_BEGINNINGS = ["start_engine", "training_run", "operator", "trainer_started", "trainer_booted", "step_backwards", "step_appeared", "earlier"] as const;
export const RunBeginning = z.enum(RUN_BEGINNINGS);
export type RunBeginning = z.infer<typeof RunBeginning>;

const RunId = z.coerce.number("must be a run number").int("must be a run number").positive("must be a run number").max(Number.MAX_SAFE_INTEGER);

export const HistoryRun = z.object({
  run: z.number().int(),
  current: z.boolean(),
  /** Unix seconds. */
  started_at: z.number(),
  began: RunBeginning,
  /** The runs API's id of the training run that began it, if one did. */
  training_run_id: z.string().nullable(),
  /** What the operator said when beginning it (operator runs), else "". */
  note: z.string(),
  /**
   * Steps in its reward history, and the episodes whose rewards they count (an episode with a
   * list reward once); the current run's include its step in progress.
   */
  steps: z.number().int(),
  episodes: z.number().int(),
  first_step: z.number().int().nullable(),
  last_step: z.number().int().nullable(),
  last_mean_reward: z.number().nullable(),
});
export type HistoryRun = z.infer<typeof HistoryRun>;

export const HistoryRunsQuery = z.object({
  limit: z.coerce.number().int().min(1).max(500).default(50),
  /** Runs before this one (newest first): the previous page's last run. */
  before: RunId.optional(),
});
export type HistoryRunsQuery = z.infer<typeof HistoryRunsQuery>;

export const HistoryRunsResponse = z.object({
  /** Null until the engine's first run begins. */
  current_run: z.number().int().nullable(),
  runs: z.array(HistoryRun),
});
export type HistoryRunsResponse = z.infer<typeof HistoryRunsResponse>;

export const BeginRunRequest = z.object({ note: textOfAtMost(1000).default("") });
export type BeginRunRequest = z.infer<typeof BeginRunRequest>;

export const BeginRunResponse = z.object({
  success: z.literal(true),
  run: z.number().int(),
  /** False when the current run had nothing in it yet: it was kept, with this note. */
  new_run: z.boolean(),
});

/** `get_reward_history`'s query: the current run's by default, or an earlier one's. */
export const RewardHistoryQuery = z.object({ run: RunId.optional() });
export type RewardHistoryQuery = z.infer<typeof RewardHistoryQuery>;
