/**
 * D1: the durable record that outlives an engine's Durable Object.
 * Migrations in migrations/ are generated from this file by drizzle-kit (`npm run db:generate`).
 */
import { sql } from "drizzle-orm";
import { JURISDICTIONS, LOCATION_HINTS } from "../protocol/admin";
import { sqliteTable, text, integer, real, primaryKey, uniqueIndex, index } from "drizzle-orm/sqlite-core";

export const engines = sqliteTable("engines", {
  name: text("name").primaryKey(),
  createdAt: integer("created_at").notNull(),
  /** Where the engine's Durable Object is asked to live (protocol/admin.ts LOCATION_HINTS), or null. */
  locationHint: text("location_hint", { enum: LOCATION_HINTS }),
  /** The jurisdiction its Durable Object is confined to (JURISDICTIONS), or null: part of the object's id. */
  jurisdiction: text("jurisdiction", { enum: JURISDICTIONS }),
  /** When a delete began (admin-routes.ts); until the row is gone the engine answers 404 and its name stays taken. */
  deletingSince: integer("deleting_since"),
  /**
   * Whether that delete keeps the engine's history (keep_history): repeated, it finishes as it
   * began. Null for a delete begun before this was recorded, which takes the repeat's word.
   */
  deletingKeepsHistory: integer("deleting_keeps_history", { mode: "boolean" }),
});

export const tokens = sqliteTable(
  "tokens",
  {
    id: text("id").primaryKey(),
    engine: text("engine").notNull().references(() => engines.name),
    role: text("role", { enum: ["operator", "trainer", "client", "viewer"] }).notNull(),
    /** SHA-256 of the secret, hex. The secret itself is shown once and never stored. */
    tokenHash: text("token_hash").notNull(),
    label: text("label").notNull().default(""),
    createdAt: integer("created_at").notNull(),
    revokedAt: integer("revoked_at"),
  },
  (t) => [uniqueIndex("tokens_hash_idx").on(t.tokenHash), index("tokens_engine_idx").on(t.engine)],
);

export const trajectories = sqliteTable(
  "trajectories",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    engine: text("engine").notNull(),
    episodeUuid: text("episode_uuid").notNull(),
    fence: integer("fence").notNull(),
    clientUuid: text("client_uuid").notNull(),
    taskId: text("task_id").notNull(),
    episodeType: text("episode_type", { enum: ["train", "eval"] }).notNull(),
    globalStep: integer("global_step"),
    /**
     * The run of the engine's history it belongs to (protocol/history.ts). Null for rows written
     * before runs: they are the engine's earlier run, run 1 (not backfilled, which would rewrite
     * the whole table in one statement).
     */
    run: integer("run"),
    /** The scalar reward, or the mean of a list reward; null when the client sent none. */
    reward: real("reward"),
    isSuccess: integer("is_success", { mode: "boolean" }),
    workflowOutput: text("workflow_output").notNull(),
    endedAt: integer("ended_at").notNull(),
    /** How the claim ended: ended, aborted or reaped (protocol/ledger.ts); null for rows written before it was kept: ended. */
    outcome: text("outcome", { enum: ["ended", "aborted", "reaped"] }),
  },
  // The outbox may deliver a row twice; this key makes the second insert a no-op.
  (t) => [
    uniqueIndex("trajectories_claim_idx").on(t.engine, t.episodeUuid, t.fence),
    // The trajectory list's order, newest first, and its keyset cursor.
    index("trajectories_ended_idx").on(t.engine, t.endedAt, t.id),
    // The same within a run, as the list filters it (src/ledger/read.ts): the expression, not
    // the column, so rows written before runs need no backfill. Without it a page of an early
    // run walked every later trajectory.
    index("trajectories_run_ended_idx").on(t.engine, sql`COALESCE(${t.run}, 1)`, t.endedAt, t.id),
    // And within a step (of a run: the dashboard's chart), a task: a page of a step's few
    // trajectories walked every trajectory of the run or the engine, checking each.
    index("trajectories_run_step_ended_idx").on(t.engine, sql`COALESCE(${t.run}, 1)`, t.globalStep, t.endedAt, t.id),
    index("trajectories_step_ended_idx").on(t.engine, t.globalStep, t.endedAt, t.id),
    index("trajectories_task_ended_idx").on(t.engine, t.taskId, t.endedAt, t.id),
  ],
);

/**
 * The trajectory ledger's index: one row per relayed LLM call, recorded by the engine's gateway
 * (protocol/ledger.ts). The call's body (messages, answer, token ids) is in R2, at `body_key`
 * from `body_offset` for `body_length` bytes: one object per batch the gateway sent.
 */
export const llmCalls = sqliteTable(
  "llm_calls",
  {
    engine: text("engine").notNull(),
    callId: text("call_id").notNull(),
    episodeUuid: text("episode_uuid").notNull(),
    fence: integer("fence").notNull(),
    run: integer("run").notNull(),
    clientUuid: text("client_uuid").notNull(),
    taskId: text("task_id").notNull(),
    // Null for calls recorded by a gateway or Worker older than it.
    episodeType: text("episode_type"),
    endpoint: text("endpoint").notNull(),
    model: text("model").notNull(),
    stream: integer("stream", { mode: "boolean" }).notNull(),
    weightVersion: integer("weight_version"),
    admittedAt: integer("admitted_at").notNull(),
    startedAt: integer("started_at").notNull(),
    firstByteAt: integer("first_byte_at"),
    doneAt: integer("done_at").notNull(),
    status: integer("status").notNull(),
    error: text("error"),
    finishReason: text("finish_reason"),
    promptTokens: integer("prompt_tokens"),
    completionTokens: integer("completion_tokens"),
    cachedTokens: integer("cached_tokens"),
    reasoningTokens: integer("reasoning_tokens"),
    truncated: integer("truncated", { mode: "boolean" }).notNull(),
    bodyKey: text("body_key").notNull(),
    bodyOffset: integer("body_offset").notNull(),
    bodyLength: integer("body_length").notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.engine, t.callId] }),
    // A claim's calls in order, for its trajectory and the list's counts.
    index("llm_calls_claim_idx").on(t.engine, t.episodeUuid, t.fence, t.admittedAt),
    // Retention deletes the oldest first.
    index("llm_calls_time_idx").on(t.engine, t.admittedAt),
  ],
);

export const rewardHistory = sqliteTable(
  "reward_history",
  {
    engine: text("engine").notNull(),
    /** The engine's own sequence number for the entry, so a retried write is idempotent. */
    seq: integer("seq").notNull(),
    /** The run of the engine's history the step belongs to; null for rows written before runs. */
    run: integer("run"),
    globalStep: integer("global_step").notNull(),
    meanReward: real("mean_reward").notNull(),
    stdReward: real("std_reward").notNull(),
    count: integer("count").notNull(),
    minReward: real("min_reward").notNull(),
    maxReward: real("max_reward").notNull(),
    timestamp: real("timestamp").notNull(),
  },
  (t) => [primaryKey({ columns: [t.engine, t.seq] })],
);

/**
 * Every step row a rollout worker posted (or an AgentJet trajectory joined by task_id). Keyed by
 * the engine's uid for the row, not by session and step: a session id is free again once the
 * engine forgot its group, and its new life's rows belong beside the old ones.
 */
export const bufferSteps = sqliteTable(
  "buffer_steps",
  {
    engine: text("engine").notNull(),
    uid: text("uid").notNull(),
    sessionId: text("session_id").notNull(),
    stepIndex: integer("step_index").notNull(),
    groupId: text("group_id").notNull(),
    /** The run of the engine's history its group belongs to; null for rows written before runs. */
    run: integer("run"),
    reward: real("reward").notNull(),
    truncated: integer("truncated", { mode: "boolean" }).notNull(),
    isSessionCompleted: integer("is_session_completed", { mode: "boolean" }).notNull(),
    weightVersion: integer("weight_version").notNull(),
    messages: text("messages").notNull(),
    response: text("response").notNull(),
    extra: text("extra").notNull(),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.engine, t.uid] }),
    index("buffer_steps_group_idx").on(t.engine, t.groupId),
    // The retention sweep deletes an engine's rows older than a cutoff, a chunk at a time.
    index("buffer_steps_created_idx").on(t.engine, t.createdAt),
  ],
);

/** What became of each group: delivered (with its pull cursor), dropped, or delivered flagged stale. */
export const bufferGroups = sqliteTable(
  "buffer_groups",
  {
    engine: text("engine").notNull(),
    /** The engine's own sequence number for the outcome, so a retried write is idempotent. */
    seq: integer("seq").notNull(),
    groupId: text("group_id").notNull(),
    /** The run of the engine's history the group belongs to; null for rows written before runs. */
    run: integer("run"),
    outcome: text("outcome", { enum: ["delivered", "dropped"] }).notNull(),
    reason: text("reason").notNull(),
    stale: integer("stale", { mode: "boolean" }).notNull(),
    sessions: integer("sessions").notNull(),
    steps: integer("steps").notNull(),
    avgReward: real("avg_reward"),
    minWeightVersion: integer("min_weight_version"),
    pullCursor: integer("pull_cursor"),
    decidedAt: integer("decided_at").notNull(),
    /** Sessions marked failed_infra (aborted and reaped AgentJet claims too): kept, never usable. */
    failedSessions: integer("failed_sessions").notNull().default(0),
    /** Delivered at its TTL short of group_size usable sessions (partial_groups: deliver). */
    partial: integer("partial", { mode: "boolean" }).notNull().default(false),
    /** When delivered: the trainer's weight version then, the group's lag behind it, and the seconds it waited ready. */
    consumerWeightVersion: integer("consumer_weight_version"),
    lagVersions: integer("lag_versions"),
    queuedSeconds: real("queued_seconds"),
  },
  (t) => [primaryKey({ columns: [t.engine, t.seq] }), index("buffer_groups_group_idx").on(t.engine, t.groupId)],
);

// ---------------------------------------------------------------- training runs (src/runs)

/** The environments the engine's agent found on its GPU host (replaced whole by each scan report). */
export const runEnvironments = sqliteTable(
  "run_environments",
  {
    engine: text("engine").notNull(),
    name: text("name").notNull(),
    className: text("class_name").notNull(),
    filePath: text("file_path").notNull(),
    description: text("description").notNull(),
    configClass: text("config_class").notNull(),
    /** JSON array of ConfigField, or null when the agent could not read them. */
    fields: text("fields"),
    fieldsSource: text("fields_source", { enum: ["import", "ast"] }),
    fieldsError: text("fields_error"),
  },
  (t) => [primaryKey({ columns: [t.engine, t.name] })],
);

/** One row per engine: when it was last scanned, where, and the files that could not be read. */
export const runCatalogs = sqliteTable("run_catalogs", {
  engine: text("engine").primaryKey(),
  agentId: text("agent_id").notNull(),
  directories: text("directories").notNull(),
  problems: text("problems").notNull(),
  scannedAt: integer("scanned_at").notNull(),
});

/** Infrastructure settings an operator pins per engine; edits may not change them. */
export const runLockedFields = sqliteTable(
  "run_locked_fields",
  {
    engine: text("engine").notNull(),
    section: text("section", { enum: ["env", "openai", "trainer"] }).notNull(),
    name: text("name").notNull(),
    /** JSON. */
    value: text("value").notNull(),
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.engine, t.section, t.name] })],
);

/** The environment selected for the engine's next run. */
export const runSelections = sqliteTable("run_selections", {
  engine: text("engine").primaryKey(),
  environment: text("environment").notNull(),
  selectedAt: integer("selected_at").notNull(),
});

/** Edits of an environment's config fields, kept per environment so switching back finds them. */
export const runConfigEdits = sqliteTable(
  "run_config_edits",
  {
    engine: text("engine").notNull(),
    environment: text("environment").notNull(),
    field: text("field").notNull(),
    /** JSON. */
    value: text("value").notNull(),
    editedAt: integer("edited_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.engine, t.environment, t.field] })],
);

export const runs = sqliteTable(
  "runs",
  {
    id: text("id").primaryKey(),
    engine: text("engine").notNull(),
    environment: text("environment").notNull(),
    environmentFile: text("environment_file").notNull(),
    status: text("status", { enum: ["pending", "starting", "running", "stopping", "stopped", "completed", "failed"] }).notNull(),
    detail: text("detail").notNull().default(""),
    configYaml: text("config_yaml").notNull(),
    /** JSON object: the edits the run was started with. */
    edits: text("edits").notNull(),
    commandSeq: integer("command_seq"),
    stopRequestedAt: integer("stop_requested_at"),
    agentId: text("agent_id").notNull().default(""),
    createdAt: integer("created_at").notNull(),
    /** When every process was ready. */
    startedAt: integer("started_at"),
    endedAt: integer("ended_at"),
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [
    index("runs_engine_created_idx").on(t.engine, t.createdAt),
    // At most one active run per engine, enforced by D1 itself: two concurrent starts cannot both insert.
    uniqueIndex("runs_one_active_idx")
      .on(t.engine)
      .where(sql`status IN ('pending', 'starting', 'running', 'stopping')`),
  ],
);

export const runProcesses = sqliteTable(
  "run_processes",
  {
    runId: text("run_id").notNull(),
    name: text("name").notNull(),
    ord: integer("ord").notNull(),
    state: text("state", { enum: ["pending", "starting", "ready", "exited", "stopped", "failed"] }).notNull(),
    pid: integer("pid"),
    command: text("command").notNull(),
    logPath: text("log_path").notNull(),
    logTail: text("log_tail").notNull(),
    exitCode: integer("exit_code"),
    signal: text("signal"),
    startedAt: integer("started_at"),
    readyAt: integer("ready_at"),
    endedAt: integer("ended_at"),
    detail: text("detail").notNull(),
  },
  (t) => [primaryKey({ columns: [t.runId, t.name] })],
);

/** A run's history: status changes, stop requests, what the agent said. */
export const runEvents = sqliteTable(
  "run_events",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    runId: text("run_id").notNull(),
    at: integer("at").notNull(),
    kind: text("kind").notNull(),
    detail: text("detail").notNull(),
  },
  (t) => [index("run_events_run_idx").on(t.runId, t.id)],
);

/** Lines of a run's metrics file, keyed by line index so a repeated report stores each once. */
export const runMetrics = sqliteTable(
  "run_metrics",
  {
    runId: text("run_id").notNull(),
    idx: integer("idx").notNull(),
    step: integer("step"),
    at: real("at").notNull(),
    /** JSON object. */
    metricValues: text("metric_values").notNull(),
  },
  (t) => [primaryKey({ columns: [t.runId, t.idx] })],
);

export const inferenceTests = sqliteTable(
  "inference_tests",
  {
    id: text("id").primaryKey(),
    engine: text("engine").notNull(),
    environment: text("environment").notNull(),
    status: text("status", { enum: ["pending", "running", "done", "failed"] }).notNull(),
    detail: text("detail").notNull(),
    /** JSON: InferenceTestRequest. */
    request: text("request").notNull(),
    /** JSON: ModelResult[]. */
    models: text("models").notNull(),
    createdAt: integer("created_at").notNull(),
    finishedAt: integer("finished_at"),
  },
  (t) => [index("inference_tests_engine_idx").on(t.engine, t.createdAt)],
);

/**
 * The histories kept under an archive name by a keep_history delete (src/http/engine-rows.ts):
 * their rows stay in the history tables under `name`; this row is what lists them and what a
 * delete of the archive finds its call bodies by. The engine it came from is not in a column
 * called `engine`: that column means "rows deleted with the engine", and this row is not.
 */
export const archives = sqliteTable(
  "archives",
  {
    /** `<engine>@<ms when the delete began>` (archiveName). */
    name: text("name").primaryKey(),
    fromEngine: text("from_engine").notNull(),
    /**
     * Where the archive's call bodies are in R2: its incarnation's prefix,
     * `ledger/<engine>/<incarnation>/` (ledger/keys.ts); null when it has no calls.
     */
    bodyPrefix: text("body_prefix"),
    /** When the delete that made it began, ms. */
    createdAt: integer("created_at").notNull(),
  },
  // An engine's delete reads its name's archives, to leave their bodies be.
  (t) => [index("archives_from_engine_idx").on(t.fromEngine)],
);
