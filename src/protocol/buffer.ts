/**
 * The rollout buffer (seeds/buffer_server.py.txt, the slime / AIEvoBox contract): rollout
 * workers post step rows; the engine groups them by group_id until group_size sessions have
 * completed; the trainer pulls whole ready groups.
 */
import { z } from "zod";
import { DEFAULT_RETENTION_DAYS, MAX_RETENTION_DAYS, TurnSample } from "./ledger";
import { idText, storableByteLimit } from "./limits";
import { openEnum } from "./open-enum";
import { isRecord } from "./record";
import { Reward } from "./swarm";

/** Bytes of UTF-8 in a row's messages (as JSON) and response together. */
export const DEFAULT_MAX_MESSAGE_BYTES = 512 * 1024;

const MIB = 1024 * 1024;
const GIB = 1024 * MIB;

/**
 * The least max_stored_bytes: 1 MiB, which holds two rows of the default max_message_bytes.
 * A config whose max_stored_bytes is below its max_message_bytes is refused (a row the buffer
 * takes must fit in it).
 */
export const MIN_BUFFER_STORED_BYTES = MIB;

/**
 * The most max_stored_bytes may be: 6 GiB of the 10 GB a Durable Object's SQLite holds, as for
 * Atropos's groups (MAX_ATROPOS_STORED_BYTES): the rest is for each row's record in the outbox
 * until D1 takes it (as large again), its index entries and pages, and the engine's other tables.
 * Beyond the bounds of each store, the engine refuses every write that adds data above its
 * storage high-water bound (docs/operations.md).
 */
export const MAX_BUFFER_STORED_BYTES = 6 * GIB;

/** 2 GiB by default: about 4,000 rows of the largest default size, and far more of usual ones. */
export const DEFAULT_BUFFER_STORED_BYTES = 2 * GIB;

export const ChatMessage = z
  .object({
    role: z.string().min(1).max(64),
    content: z.union([z.string(), z.array(z.unknown()), z.null()]).default(""),
  })
  .loose();

export const StepRow = z
  .object({
    session_id: idText(256),
    group_id: idText(256),
    step_index: z.number().int("must be an integer").nonnegative("must not be negative"),
    /** The prompt messages of this step; the response is appended as the assistant's turn. */
    messages: z.array(ChatMessage).max(10_000),
    response: z.string().default(""),
    reward: Reward,
    truncated: z.boolean().default(false),
    is_session_completed: z.boolean().default(false),
    /**
     * The weights' version that made the row. A row without one takes the engine's version when
     * it arrives (update_engine_status's weight_version, 0 before any), as a claim does: taken as
     * 0, a worker that does not track versions had its rows look as stale as any can be.
     */
    weight_version: z.number().int().nonnegative().optional(),
    /**
     * Our addition: the session failed for a reason that is not the policy's (the sandbox died,
     * the judge timed out). Sticky: one such row marks its whole session. A failed session is
     * kept and counted but does not count toward its group's group_size, and is not trained on.
     */
    failed_infra: z.boolean().default(false),
  })
  // Free-form fields (env_id, anything a worker wants kept) ride along into extra_info.
  .catchall(z.unknown());
export type StepRow = z.infer<typeof StepRow>;
/** A row as the buffer stores it: with its weight version. */
export type VersionedStepRow = StepRow & { weight_version: number };

/**
 * extra_info.source of the rows the engine makes from AgentJet claims (session_id
 * "<episode>#<fence>"). Only the engine sets it: a posted row carrying it is refused, so a
 * pull's item with it is a claim's own and may be given that claim's tokens.
 */
export const CLAIM_ROW_SOURCE = "agentjet";

export const PostStepsRequest = z.object({ steps: z.array(StepRow).min(1, "must hold at least one row").max(1000, "at most 1000 rows per batch") });
export type PostStepsRequest = z.infer<typeof PostStepsRequest>;

export const PostStepsResponse = z.object({
  success: z.literal(true),
  /** Rows stored now. */
  accepted: z.number().int(),
  /** Rows already stored by an earlier (retried) batch: (session_id, step_index) seen before, also once their group was delivered or dropped. */
  duplicates: z.number().int(),
  /** New rows for groups already dropped or delivered: ignored and counted. */
  late: z.number().int(),
  /** Groups that became ready with this batch. */
  groups_ready: z.array(z.string()),
});
export type PostStepsResponse = z.infer<typeof PostStepsResponse>;

/**
 * `schema` read after `coerce`, as the seed read the value before using it. The input type stays
 * the schema's own, so typed clients (src/client) still send what the schema documents, and the
 * OpenAPI document describes the schema itself (zod documents a preprocess by what it feeds).
 */
function seedCoerced<S extends z.ZodType>(coerce: (v: unknown) => unknown, schema: S) {
  return z.preprocess((v: z.input<S>) => coerce(v), schema);
}

/** Python's int() of an int, a float (truncated) or a bool: the number, or null for any other value (or ±Infinity, NaN). */
function pyIntOf(v: unknown): number | null {
  if (typeof v === "boolean") return v ? 1 : 0;
  if (typeof v === "number") return Number.isFinite(v) ? Math.trunc(v) : null;
  // int("8"), int(" -3 "), int("1_000"); int("2.5") and int("all") raise.
  if (typeof v === "string" && /^\s*[+-]?\d+(_\d+)*\s*$/.test(v)) return Number(v.trim().replace(/_/g, ""));
  return null;
}

/** Python's truthiness: None, False, 0, "", [] and {} are false, anything else (NaN, "false") true. */
function pyTruthy(v: unknown): boolean {
  if (v === null || v === undefined || v === false || v === 0 || v === "") return false;
  if (Array.isArray(v)) return v.length > 0;
  if (typeof v === "object") return Object.keys(v).length > 0;
  return true;
}

/**
 * max_groups as the seed read it (buffer_server.py.txt:433-438): int(max_groups) in a try, and
 * anything int() refuses ("all", [], "2.5"), 0 or less, as no limit: "2" is 2, 2.7 is 2, -1 is
 * none. Absent stays absent.
 */
const seedMaxGroups = (v: unknown): unknown => {
  if (v === undefined) return undefined;
  const n = pyIntOf(v);
  // Past 2^53 (sys.maxsize, Python's usual "no limit") no buffer holds that many: no limit.
  return n === null || n <= 0 || n > Number.MAX_SAFE_INTEGER ? null : n;
};

export const TRAINING_FORMS = ["sequence", "turns"] as const;
export type TrainingForm = (typeof TRAINING_FORMS)[number];

export const GetRolloutDataRequest = seedCoerced(
  // The seed read a body that is not a JSON object (null, [], a string) as {} (buffer_server.py.txt:431-432).
  (v) => (isRecord(v) ? v : {}),
  z.object({
    /** As in the seed, 0 or null means no limit of the trainer's; a pull hands out at most 1000 groups either way. */
    max_groups: seedCoerced(seedMaxGroups, z.number().int().nonnegative().nullable().optional()),
    /** Re-read an earlier pull (after a trainer crash) by the cursor its meta_info carried. */
    cursor: z.number().int().positive().optional(),
    /**
     * Our addition: how an AgentJet claim's tokens are given. `sequence` (the default): one
     * sequence over all its turns, top-level `tokens` etc. `turns`: each successful call a sample
     * of its own, in `turns` (docs/ledger.md, "Training turn by turn").
     */
    training: z.enum(TRAINING_FORMS).optional(),
  }),
);
export type GetRolloutDataRequest = z.infer<typeof GetRolloutDataRequest>;

export const RolloutItem = z.object({
  uid: z.string(),
  instance_id: z.string(),
  messages: z.array(z.record(z.string(), z.unknown())),
  reward: z.number(),
  extra_info: z.record(z.string(), z.unknown()),
  /**
   * Our addition, in slime's Sample field names: the sequence to train on, from the trajectory
   * ledger, when the engine captured tokens and the item is an AgentJet claim whose calls were
   * relayed (docs/ledger.md). Absent otherwise.
   */
  tokens: z.array(z.number().int()).optional(),
  response_length: z.number().int().optional(),
  loss_mask: z.array(z.number().int()).optional(),
  rollout_log_probs: z.array(z.number()).optional(),
  /** Our addition: with `training: "turns"`, each successful call whose tokens are known, in order (extra_info.turns_without_tokens names the others). */
  turns: z.array(TurnSample).optional(),
});
export type RolloutItem = z.infer<typeof RolloutItem>;

/** What a pull says of each group it hands out: its failures, and how far off-policy it is. */
export const GroupReport = z.object({
  group_id: z.string(),
  /** Completed sessions that count (not failed_infra); the items of these carry extra_info.usable true. */
  usable_sessions: z.number().int(),
  /** Sessions marked failed_infra (also aborted or reaped AgentJet claims): kept and counted, never usable. */
  failed_sessions: z.number().int(),
  /** Delivered at its TTL with fewer than group_size usable sessions (partial_groups: deliver). */
  partial: z.boolean(),
  /** The weight version of the group's oldest segment: an AgentJet rollout's is the version it was claimed at. */
  oldest_weight_version: z.number().int().nullable(),
  /** consumer_weight_version minus oldest_weight_version: the group's lag in versions when it was consumed. */
  lag_versions: z.number().int().nullable(),
  /** Seconds from the group's first row to this pull. */
  age_seconds: z.number(),
  /** Seconds the group waited ready in the buffer before this pull (prime-rl #3310: the queue is off-policyness too). */
  queued_seconds: z.number(),
});
export type GroupReport = z.infer<typeof GroupReport>;

export const RolloutMetaInfo = z.object({
  total_samples: z.number().int(),
  avg_reward: z.number(),
  finished_groups: z.array(z.string()),
  avg_weight_version: z.number(),
  max_weight_version: z.number(),
  /** Our addition: pass back as `cursor` to read this pull again. Null when nothing was handed out. */
  cursor: z.number().int().nullable(),
  /** Our addition: groups in this pull that lag more than max_staleness weight versions. */
  stale_groups: z.array(z.string()),
  /** Our addition: the trainer's weight version when it pulled (update_engine_status), null if it never said. */
  consumer_weight_version: z.number().int().nullable(),
  /** Our addition: one report per group of the pull, in finished_groups' order. */
  groups: z.array(GroupReport),
});

export const GetRolloutDataResponse = z.object({
  success: z.boolean(),
  message: z.string(),
  data: z.object({ data: z.array(RolloutItem), meta_info: RolloutMetaInfo }),
});
export type GetRolloutDataResponse = z.infer<typeof GetRolloutDataResponse>;

/**
 * flag delivers stale groups marked; drop discards them at the pull; pace discards nothing and
 * instead holds back new work (claims, sessions of new groups) while what is already under way
 * could be consumed more than max_staleness versions late (src/engine/pacing.ts).
 */
export const STALENESS_POLICIES = ["flag", "drop", "pace"] as const;
export const StalenessPolicy = z.enum(STALENESS_POLICIES);
export type StalenessPolicy = z.infer<typeof StalenessPolicy>;

const PARTIAL_GROUPS_POLICIES = ["deliver", "drop"] as const;
export const PartialGroupsPolicy = z.enum(PARTIAL_GROUPS_POLICIES);
export type PartialGroupsPolicy = z.infer<typeof PartialGroupsPolicy>;

export const BufferConfig = z.object({
  group_size: z.number().int().min(1).max(4096),
  /** Seconds without a new row after which an incomplete group is dropped. 0 disables. */
  ttl_seconds: z.number().min(0).max(30 * 24 * 3600),
  /** Weight versions a group's oldest step may lag behind the trainer's; null disables. */
  max_staleness: z.number().int().min(0).nullable(),
  staleness_policy: StalenessPolicy,
  /**
   * Rollouts the trainer consumes per weight version (its batch), for pace. Null: measured from
   * the pulls (sessions handed out per version), else taken from an AgentJet claim's
   * throttle_policy (expected_batch_size x expected_num_repeat).
   */
  rollouts_per_version: z.number().int().min(1).max(1_000_000).nullable(),
  /** What happens to a group still short of group_size usable sessions at its TTL: delivered with its usable mask, or dropped. */
  partial_groups: PartialGroupsPolicy,
  /**
   * Bytes of UTF-8 in one row's messages (as JSON) and response. At most what one stored value
   * may take: a row is also refused when, with its extra fields, it would not fit the engine's
   * records as they hold it (escaped inside their JSON).
   */
  max_message_bytes: storableByteLimit(1024),
  /**
   * Bytes of UTF-8 of rows waiting to be pulled (each row's messages, response and extra fields
   * as JSON: those of pending and ready groups; not the last pulls', kept to be read again) past
   * which no new group is opened. A batch that opens one and would pass it is refused 503
   * `buffer_full` with Retry-After and stores none of its rows that open a group; rows of groups already open are taken. One
   * larger than it alone is a 413. Nothing else bounds what a buffer whose trainer
   * stopped pulling holds: ready groups stay until pulled, and staleness_policy flag drops none.
   */
  max_stored_bytes: z.number().int().min(MIN_BUFFER_STORED_BYTES).max(MAX_BUFFER_STORED_BYTES),
  /**
   * Days each step row is kept in D1 (`buffer_steps`) after it was stored: every row holds its
   * whole conversation, and D1 is one database every engine shares. Groups' outcomes stay.
   */
  d1_retention_days: z.number().int().min(1).max(MAX_RETENTION_DAYS),
});
export type BufferConfig = z.infer<typeof BufferConfig>;

export const DEFAULT_BUFFER_CONFIG: BufferConfig = {
  group_size: 1,
  ttl_seconds: 1800,
  max_staleness: 4,
  staleness_policy: "flag",
  rollouts_per_version: null,
  partial_groups: "drop",
  max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
  max_stored_bytes: DEFAULT_BUFFER_STORED_BYTES,
  d1_retention_days: DEFAULT_RETENTION_DAYS,
};

// Strict: a misspelt setting would otherwise be dropped and the operator told it was applied.
export const UpdateBufferConfigRequest = BufferConfig.partial().strict();

/**
 * The config as answers give it (configure_buffer's, /health's): a pinned SDK reads those of a
 * newer exchange, whose policies may be more; setting one it does not know stays a 400.
 */
export const BufferConfigView = BufferConfig.extend({ staleness_policy: openEnum(STALENESS_POLICIES), partial_groups: openEnum(PARTIAL_GROUPS_POLICIES) });

/**
 * start_rollout's fields as the seed read them (buffer_server.py.txt:528-539). What the seed's
 * int() raised on (a 500 there) is left to the schema, which refuses it with a 422.
 */
const seedStart = {
  // group_size = max(1, int(data.get("num_repeat_per_sample", 16))): "8" is 8, 2.7 is 2, 0 is 1.
  num_repeat_per_sample: (v: unknown): unknown => {
    if (v === undefined) return undefined;
    const n = pyIntOf(v);
    return n === null ? v : Math.max(1, n);
  },
  // if restart_training: by truthiness, so 1 and "yes" restart (and, as in the seed, "false" too).
  restart_training: (v: unknown): unknown => (v === undefined ? undefined : pyTruthy(v)),
  // str(data.get("job_session") or uuid4().hex): a falsy one is none (a new session); a number or a bool is its text.
  job_session: (v: unknown): unknown => {
    if (!pyTruthy(v)) return undefined;
    if (typeof v === "number") return String(v);
    // Python's str() of a bool; false was falsy above.
    if (typeof v === "boolean") return "True";
    // A list or an object is refused rather than named after its Python repr.
    return v;
  },
};

export const StartRolloutRequest = z
  .object({
    num_repeat_per_sample: seedCoerced(seedStart.num_repeat_per_sample, z.number().int().min(1).max(4096).default(16)),
    restart_training: seedCoerced(seedStart.restart_training, z.boolean().default(false)),
    job_session: seedCoerced(seedStart.job_session, z.string().min(1).max(256).optional()),
  })
  .loose();
export type StartRolloutRequest = z.infer<typeof StartRolloutRequest>;

export const StartRolloutResponse = z.object({ success: z.literal(true), message: z.string(), job_session: z.string(), group_size: z.number() });

export const BufferStats = z.object({
  pending_groups: z.number(),
  ready_groups: z.number(),
  delivered_groups: z.number(),
  dropped_groups: z.number(),
  stale_groups: z.number(),
  pending_steps: z.number(),
  late_rows_ignored: z.number(),
  duplicate_rows: z.number(),
  /** Sessions marked failed_infra, aborted or reaped claims included. */
  failed_sessions: z.number(),
  /** Groups delivered at their TTL short of group_size usable sessions (partial_groups: deliver). */
  partial_groups_delivered: z.number(),
  /** Groups dropped at their TTL short of group_size usable sessions. */
  partial_groups_dropped: z.number(),
  /** Rollouts the trainer took per weight version, as last measured from its pulls; null until it moved on once. */
  measured_rollouts_per_version: z.number().nullable(),
  /** Claims and new groups' sessions held back by pace (not discarded: the client asks again). */
  paced_refusals: z.number(),
  /** Bytes of every row held, the kept pulls' included; config.max_stored_bytes bounds those waiting to be pulled. */
  stored_bytes: z.number(),
  /** Batches opening new groups refused because they would pass max_stored_bytes (503 buffer_full). */
  full_refusals: z.number(),
});
export type BufferStats = z.infer<typeof BufferStats>;

/** The last pull's staleness, for the dashboard: its groups' reports, the most lagging first. */
export const LastPull = z.object({
  cursor: z.number().int(),
  /** Unix seconds. */
  pulled_at: z.number(),
  consumer_weight_version: z.number().int().nullable(),
  group_count: z.number().int(),
  /** At most LAST_PULL_GROUPS of them, by lag (most first), then time queued. */
  groups: z.array(GroupReport),
});
export type LastPull = z.infer<typeof LastPull>;

export const LAST_PULL_GROUPS = 20;

export const HealthResponse = z.object({
  status: z.literal("healthy"),
  /**
   * The seed's own fields (buffer_server.py.txt:628-636), which its callers read: whether the
   * rollout workers (AIEvoBox) run, as the agent last said; whether an LLM proxy serves them (the
   * agent's gateway, while the agent is connected); and the data manager, which is always there.
   */
  aievobox_running: z.boolean(),
  llm_proxy_running: z.boolean(),
  data_manager_initialized: z.literal(true),
  engine_status: z.string(),
  buffer: BufferStats.extend({ config: BufferConfigView, last_pull: LastPull.nullable() }),
  agent: z.object({ connected: z.boolean(), host: z.string().nullable(), last_seen: z.number().nullable() }),
});
export type HealthResponse = z.infer<typeof HealthResponse>;
