/**
 * D1: the durable record that outlives an engine's Durable Object.
 * Migrations in migrations/ are generated from this file by drizzle-kit (`npm run db:generate`).
 */
import { sqliteTable, text, integer, real, primaryKey, uniqueIndex, index } from "drizzle-orm/sqlite-core";

export const engines = sqliteTable("engines", {
  name: text("name").primaryKey(),
  createdAt: integer("created_at").notNull(),
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
    /** The scalar reward, or the mean of a list reward; null when the client sent none. */
    reward: real("reward"),
    isSuccess: integer("is_success", { mode: "boolean" }),
    workflowOutput: text("workflow_output").notNull(),
    endedAt: integer("ended_at").notNull(),
  },
  // The outbox may deliver a row twice; this key makes the second insert a no-op.
  (t) => [uniqueIndex("trajectories_claim_idx").on(t.engine, t.episodeUuid, t.fence), index("trajectories_step_idx").on(t.engine, t.globalStep)],
);

export const rewardHistory = sqliteTable(
  "reward_history",
  {
    engine: text("engine").notNull(),
    /** The engine's own sequence number for the entry, so a retried write is idempotent. */
    seq: integer("seq").notNull(),
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

/** Every step row a rollout worker posted (or an AgentJet trajectory joined by task_id). */
export const bufferSteps = sqliteTable(
  "buffer_steps",
  {
    engine: text("engine").notNull(),
    uid: text("uid").notNull(),
    sessionId: text("session_id").notNull(),
    stepIndex: integer("step_index").notNull(),
    groupId: text("group_id").notNull(),
    reward: real("reward").notNull(),
    truncated: integer("truncated", { mode: "boolean" }).notNull(),
    isSessionCompleted: integer("is_session_completed", { mode: "boolean" }).notNull(),
    weightVersion: integer("weight_version").notNull(),
    messages: text("messages").notNull(),
    response: text("response").notNull(),
    extra: text("extra").notNull(),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.engine, t.sessionId, t.stepIndex] }), index("buffer_steps_group_idx").on(t.engine, t.groupId)],
);

/** What became of each group: delivered (with its pull cursor), dropped, or delivered flagged stale. */
export const bufferGroups = sqliteTable(
  "buffer_groups",
  {
    engine: text("engine").notNull(),
    /** The engine's own sequence number for the outcome, so a retried write is idempotent. */
    seq: integer("seq").notNull(),
    groupId: text("group_id").notNull(),
    outcome: text("outcome", { enum: ["delivered", "dropped"] }).notNull(),
    reason: text("reason").notNull(),
    stale: integer("stale", { mode: "boolean" }).notNull(),
    sessions: integer("sessions").notNull(),
    steps: integer("steps").notNull(),
    avgReward: real("avg_reward"),
    minWeightVersion: integer("min_weight_version"),
    pullCursor: integer("pull_cursor"),
    decidedAt: integer("decided_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.engine, t.seq] }), index("buffer_groups_group_idx").on(t.engine, t.groupId)],
);
