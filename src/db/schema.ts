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
