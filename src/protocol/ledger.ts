/**
 * The trajectory ledger: every relayed LLM call of a live claim, recorded by the engine's
 * inference gateway (the local-agent), which is the one place that sees what the policy was given
 * and what it answered, token ids included. The gateway sends its records to the exchange in
 * batches; the exchange keeps an index row per call in D1 and the call's body in R2.
 *
 * Bodies are stored without quadratic growth (docs/ledger.md, "Storage, within Cloudflare's
 * limits"): a call whose messages (or prompt token ids) begin with the same claim's previous
 * call's messages and answer (prompt and completion) stores only what follows, with a reference
 * to that call; anything else is stored whole. Readers rebuild whole conversations and check the splice again, so a trajectory says
 * where a turn's history was rewritten or re-tokenized instead of splicing silently.
 */
import { z } from "zod";
import { idText, isWellFormed } from "./limits";
import { openEnum } from "./open-enum";
import { unpackFloats, unpackInts } from "./packed";
import { queryNumber } from "./query-numbers";
import { RelayEndpoint } from "./relay-endpoint";

export const CAPTURE_MODES = ["off", "messages", "tokens"] as const;
/** What the gateway records of each relayed call: nothing, the messages, or also token ids and logprobs. */
export const CaptureMode = z.enum(CAPTURE_MODES);
export type CaptureMode = z.infer<typeof CaptureMode>;

/** How an HTTP upstream is asked for token ids and logprobs (their OpenAI-compatible servers differ). */
export const TOKEN_DIALECTS = ["vllm", "sglang"] as const;
export const TokenDialect = z.enum(TOKEN_DIALECTS);
export type TokenDialect = z.infer<typeof TokenDialect>;

export const DEFAULT_RETENTION_DAYS = 30;
export const MAX_RETENTION_DAYS = 3650;

/** The engine's ledger settings (operator). */
export const LedgerConfig = z.object({
  capture: CaptureMode,
  retention_days: z.number().int().min(1).max(MAX_RETENTION_DAYS),
});
export type LedgerConfig = z.infer<typeof LedgerConfig>;
/** The settings as answers give them: a pinned SDK reads a newer exchange's, whose capture modes may be more. */
export const LedgerConfigView = LedgerConfig.extend({ capture: openEnum(CAPTURE_MODES) });

export const UpdateLedgerConfigRequest = z.strictObject({
  capture: CaptureMode.optional(),
  retention_days: z.number().int().min(1).max(MAX_RETENTION_DAYS).optional(),
});
export type UpdateLedgerConfigRequest = z.infer<typeof UpdateLedgerConfigRequest>;

/**
 * Names the ledger keys and looks calls up by are well-formed (no lone surrogate): D1 would store
 * one as U+FFFD, and the call would come back under another name.
 */
const wellFormed = z.string().refine(isWellFormed, "holds a lone surrogate, which has no UTF-8 form: it would be stored as U+FFFD");

/**
 * What the exchange tells the gateway about a call, inside the signed relay envelope: the gateway
 * trusts these because the Worker signed them.
 */
export const CallContext = z.object({
  /** Unique per relayed call (the Worker's randomUUID): the record's key, so a resent batch is idempotent. */
  call_id: idText(64),
  capture: CaptureMode,
  // Bounded as a claim's own fields are (protocol/swarm.ts): the Worker signs no longer ones.
  client_uuid: wellFormed.max(256, "is longer than 256 characters"),
  task_id: wellFormed.max(256, "is longer than 256 characters"),
  /** The claim's episode type ("train" or "eval"): a live claim's trajectory says it. Absent from Workers and gateways older than it. */
  episode_type: wellFormed.max(64, "is longer than 64 characters").optional(),
  /** The engine's weight version when the call was admitted; null before the trainer reported one. */
  weight_version: z.number().int().nullable(),
  /** The engine's current run of its history (history-runs.ts). */
  run: z.number().int().nonnegative(),
  /** When the Worker admitted the call, ms since the epoch. */
  admitted_at: z.number().int().nonnegative(),
});
export type CallContext = z.infer<typeof CallContext>;
/** The context as a gateway older than its Worker reads it: a capture mode it does not know is its to handle (gateway/server.ts), not a reason to fail the call. */
export const CallContextAsRead = CallContext.extend({ capture: openEnum(CAPTURE_MODES) });

/**
 * Token ids as base64 of little-endian uint32, logprobs as base64 of little-endian float32: about
 * 5.3 bytes a token each, against 6 to 20 as JSON numbers.
 */
export const PackedInts = z
  .string()
  .regex(/^[A-Za-z0-9+/]*={0,2}$/, "base64 of little-endian uint32")
  .refine((s) => unpacked(unpackInts, s) !== null, "base64 of whole little-endian uint32 values");
/** Finite values only: JSON, which readers are answered in, has no NaN or infinity (and an upstream's JSON gave none). */
export const PackedFloats = z
  .string()
  .regex(/^[A-Za-z0-9+/]*={0,2}$/, "base64 of little-endian float32")
  .refine((s) => unpacked(unpackFloats, s)?.every(Number.isFinite) === true, "base64 of whole little-endian float32 values, all finite");

/** The values `text` packs, or null when it does not decode to whole 32-bit values. */
function unpacked(unpack: (text: string) => number[], text: string): number[] | null {
  try {
    return unpack(text);
  } catch {
    return null;
  }
}

/** A reference to the same claim's call whose conversation this one continues. */
export const PrefixRef = z.object({
  call_id: idText(64),
  /** How many leading items (messages, or prompt tokens) come from it: its own, then its answer. */
  count: z.number().int().nonnegative(),
});
export type PrefixRef = z.infer<typeof PrefixRef>;

export const CallTokens = z.object({
  /** The prompt's ids after `prompt_prefix.count` ids shared with the previous call (all of them when null). */
  prompt_prefix: PrefixRef.nullable(),
  prompt_ids: PackedInts,
  completion_ids: PackedInts,
  completion_logprobs: PackedFloats,
});
export type CallTokens = z.infer<typeof CallTokens>;

/** The part of a record kept in R2: what was asked and answered, stored as the delta described above. */
export const CallBody = z.object({
  /** The request without its messages and tools: model, sampling parameters, tool_choice, ... */
  params: z.record(z.string(), z.unknown()),
  /** The tools offered; null when they are the prefix call's (or none were offered and none before). */
  tools: z.array(z.unknown()).nullable(),
  tools_from_prefix: z.boolean(),
  /** The messages after `prefix.count` shared with the previous call's messages and answer. */
  prefix: PrefixRef.nullable(),
  messages: z.array(z.unknown()),
  /** The answer's message (a streamed answer assembled), null when the call failed. */
  answer: z.record(z.string(), z.unknown()).nullable(),
  /** With capture `tokens`, when the upstream gave them. */
  tokens: CallTokens.nullable(),
  /**
   * A successful call relayed with capture off, of a claim whose earlier calls were recorded: a
   * stub (no messages, answer or tokens; the record's status and times) that says a turn happened
   * whose tokens the ledger does not have. Absent on every other call.
   */
  uncaptured: z.literal(true).optional(),
});
export type CallBody = z.infer<typeof CallBody>;

export const CallUsage = z.object({
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative(),
  /**
   * Of the usage's details, when the upstream gave them (OpenAI's names; vLLM and SGLang give
   * cached_tokens with prompt token details on): prompt tokens served from the prefix cache, and
   * completion tokens spent thinking. Absent from an agent older than these fields.
   */
  cached_tokens: z.number().int().nonnegative().optional(),
  reasoning_tokens: z.number().int().nonnegative().optional(),
});
export type CallUsage = z.infer<typeof CallUsage>;

/** A call's usage as read: the details null when the upstream did not give them. */
export const CallUsageView = z.object({
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative(),
  // Optional in the view too, for the typed client reading an exchange from before them.
  cached_tokens: z.number().int().nonnegative().nullable().default(null),
  reasoning_tokens: z.number().int().nonnegative().nullable().default(null),
});

/** One relayed call as the gateway records it. */
export const CallRecord = z.object({
  ...CallContext.shape,
  episode_uuid: idText(512),
  fence: z.number().int().nonnegative(),
  endpoint: RelayEndpoint,
  model: z.string().max(512),
  stream: z.boolean(),
  /** When the gateway received the call, answered its first byte, and finished, ms since the epoch. */
  started_at: z.number().int().nonnegative(),
  first_byte_at: z.number().int().nonnegative().nullable(),
  done_at: z.number().int().nonnegative(),
  /** The HTTP status the client was answered with (200 for a stream that later broke: see error). */
  status: z.number().int().min(100).max(599),
  /** `code: message` of a failed call (or a stream broken after its status line), else null. */
  error: z.string().max(2000).nullable(),
  finish_reason: z.string().max(64).nullable(),
  usage: CallUsage.nullable(),
  /** The body was over the record cap: the messages and tokens were left out, the answer cut short. */
  truncated: z.boolean(),
  body: CallBody,
});
export type CallRecord = z.infer<typeof CallRecord>;

/** The most calls one batch may carry; the request's byte limit bounds it too. */
export const MAX_CALLS_PER_BATCH = 500;

export const CallBatch = z.object({
  /** Chosen by the gateway, the same on every resend of this batch: its R2 object's name. */
  batch_id: z.string().regex(/^[A-Za-z0-9_-]{8,64}$/, "8 to 64 of [A-Za-z0-9_-]"),
  calls: z.array(CallRecord).min(1).max(MAX_CALLS_PER_BATCH),
});
export type CallBatch = z.infer<typeof CallBatch>;

export const CallBatchResponse = z.object({
  /** Calls newly recorded; a resent batch answers 0 for the calls it already had. */
  recorded: z.number().int().nonnegative(),
  /** Calls of this batch the exchange already had. */
  duplicates: z.number().int().nonnegative(),
});
export type CallBatchResponse = z.infer<typeof CallBatchResponse>;

/**
 * One medium (a content part's string: a `data:` URL, audio's base64) the gateway took out of
 * recorded messages, uploaded once by its digest (PUT <engine>/agent/media/<sha256>): the
 * records say `rx-media:sha256:<hex>` in its place (docs/ledger.md, "Media").
 */
export const MediaUpload = z.strictObject({
  /** The string exactly as the client sent it; its UTF-8 bytes are what the digest is of. */
  data: z.string(),
});
export type MediaUpload = z.infer<typeof MediaUpload>;

export const MediaUploadResponse = z.object({
  sha256: z.string(),
  /** Its UTF-8 bytes. */
  bytes: z.number().int().nonnegative(),
});
export type MediaUploadResponse = z.infer<typeof MediaUploadResponse>;

// ---------------------------------------------------------------- reading

export const TRAJECTORY_OUTCOMES = ["ended", "aborted", "reaped"] as const;
export const TrajectoryOutcome = z.enum(TRAJECTORY_OUTCOMES);
/** An outcome as a reader reads it: a newer exchange may add ways a claim ends (open-enum.ts). */
const TrajectoryOutcomeView = openEnum(TRAJECTORY_OUTCOMES);
export type TrajectoryOutcome = z.infer<typeof TrajectoryOutcome>;

const intParam = (min: number, max: number) => queryNumber(z.number().int().min(min).max(max));
const finiteParam = queryNumber(z.number().refine(Number.isFinite, "a finite number"));

export const MAX_TRAJECTORY_PAGE = 200;

/** Filters of the trajectory list and the export, from the query string. */
export const TrajectoryFilters = z.strictObject({
  run: intParam(0, Number.MAX_SAFE_INTEGER).optional(),
  global_step: intParam(Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER).optional(),
  task_id: z.string().max(512).optional(),
  outcome: TrajectoryOutcome.optional(),
  min_reward: finiteParam.optional(),
  max_reward: finiteParam.optional(),
  /** Ended at or after / before, ms since the epoch. */
  since: intParam(0, Number.MAX_SAFE_INTEGER).optional(),
  until: intParam(0, Number.MAX_SAFE_INTEGER).optional(),
});
export type TrajectoryFilters = z.infer<typeof TrajectoryFilters>;

export const TrajectoryListQuery = z.strictObject({
  ...TrajectoryFilters.shape,
  cursor: z.string().max(512).optional(),
  limit: intParam(1, MAX_TRAJECTORY_PAGE).optional(),
});
export type TrajectoryListQuery = z.infer<typeof TrajectoryListQuery>;

/**
 * How a trajectory's calls are written. `whole`: every call with its whole conversation, prompt
 * ids and /v1/completions prompt, so the answer grows with the square of the claim's turns.
 * `delta`: each call with what it added to the call its `messages_from`, `tokens.prompt_from` and
 * `prompt_from` name, as the ledger stores it, so the answer grows with the turns;
 * `wholeTrajectory()` (exported with `LedgerClient`) gives the whole form back (docs/ledger.md, "Delta form").
 */
const TRAJECTORY_FORMS = ["whole", "delta"] as const;
export const TrajectoryForm = z.enum(TRAJECTORY_FORMS);
export type TrajectoryForm = z.infer<typeof TrajectoryForm>;

/** The query of one trajectory's read. */
export const TrajectoryReadQuery = z.strictObject({
  /** `whole` when absent. */
  form: TrajectoryForm.optional(),
});
export type TrajectoryReadQuery = z.infer<typeof TrajectoryReadQuery>;

export const TrajectoryExportQuery = z.strictObject({
  ...TrajectoryFilters.shape,
  /** Each line's form (`whole` when absent). */
  form: TrajectoryForm.optional(),
  /** JSON lines, one trajectory each (the only format so far; named so that others can follow). */
  format: z.literal("jsonl").optional(),
  /** Resume an export after the trajectory a list page's next_cursor names. */
  cursor: z.string().max(512).optional(),
});
export type TrajectoryExportQuery = z.infer<typeof TrajectoryExportQuery>;

export const TrajectorySummary = z.object({
  episode_uuid: z.string(),
  fence: z.number().int(),
  client_uuid: z.string(),
  task_id: z.string(),
  episode_type: z.string(),
  run: z.number().int(),
  global_step: z.number().int().nullable(),
  outcome: TrajectoryOutcomeView,
  reward: z.number().nullable(),
  is_success: z.boolean().nullable(),
  ended_at: z.number().int(),
  calls: z.number().int().nonnegative(),
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative(),
  /** Sums over the calls whose upstream gave them (CallUsage); 0 when none did. */
  cached_tokens: z.number().int().nonnegative().default(0),
  reasoning_tokens: z.number().int().nonnegative().default(0),
});
export type TrajectorySummary = z.infer<typeof TrajectorySummary>;

export const TrajectoryListResponse = z.object({
  trajectories: z.array(TrajectorySummary),
  /** Pass back as `cursor` for the next (older) page; null at the end. */
  next_cursor: z.string().nullable(),
});
export type TrajectoryListResponse = z.infer<typeof TrajectoryListResponse>;

/** How a call's history relates to the claim's previous call. */
export const SPLICES = ["first", "extends", "rewritten"] as const;
export const Splice = z.enum(SPLICES);
/** As a reader reads it: a newer exchange may tell more ways a call continues the one before (open-enum.ts). */
const SpliceView = openEnum(SPLICES);

/** One call as a reader sees it: whole messages, and whole token arrays as numbers. */
export const TrajectoryCall = z.object({
  call_id: z.string(),
  endpoint: RelayEndpoint,
  model: z.string(),
  stream: z.boolean(),
  weight_version: z.number().int().nullable(),
  admitted_at: z.number().int(),
  started_at: z.number().int(),
  first_byte_at: z.number().int().nullable(),
  done_at: z.number().int(),
  status: z.number().int(),
  error: z.string().nullable(),
  finish_reason: z.string().nullable(),
  usage: CallUsageView.nullable(),
  truncated: z.boolean(),
  /** The claim had ended (or been superseded) before the call finished. */
  after_claim_end: z.boolean(),
  /**
   * Relayed while capture was off, after calls of its claim were recorded: only its status and
   * times are known (messages and answer empty, tokens null). `training` takes it as a call
   * without token ids: the sequence ends there, or it is in the first token call's prompt.
   * (Defaults to false for the typed client reading an exchange from before the field.)
   */
  uncaptured: z.boolean().default(false),
  /**
   * The call continues a call the ledger does not have whole (its batch never stored, removed by
   * retention, its body gone): `messages` and `tokens.prompt_ids` are only what this call added,
   * and `training` stops before it.
   */
  prefix_missing: z.boolean(),
  params: z.record(z.string(), z.unknown()),
  /**
   * Delta form only: a /v1/completions `params.prompt` is what follows the first `count` of the
   * named call's prompt and answer (text after text; after ids, its completion's ids); null when
   * it is whole, or (with prefix_missing) what it added to a call not known.
   */
  prompt_from: PrefixRef.nullable().optional(),
  tools: z.array(z.unknown()).nullable(),
  /**
   * Delta form only: `messages` are what follows the first `count` of the named call's messages
   * and answer; null when they are whole, or (with prefix_missing) what the call added to a call
   * not known. The named call is of this trajectory (it may come later in `calls`: concurrent
   * calls are stored against whichever finished last).
   */
  messages_from: PrefixRef.nullable().optional(),
  messages: z.array(z.unknown()),
  /** Whether `messages` begin with the previous successful call's messages and answer. */
  messages_splice: SpliceView,
  answer: z.record(z.string(), z.unknown()).nullable(),
  tokens: z
    .object({
      /** Delta form only: `prompt_ids` follow the first `count` of the named call's prompt and completion ids, as `messages_from`. */
      prompt_from: PrefixRef.nullable().optional(),
      prompt_ids: z.array(z.number().int()),
      completion_ids: z.array(z.number().int()),
      completion_logprobs: z.array(z.number()),
      /** Whether `prompt_ids` begin with the previous successful call's prompt and completion ids. */
      splice: SpliceView,
    })
    .nullable(),
});
export type TrajectoryCall = z.infer<typeof TrajectoryCall>;

/** The sequence slime and verl train on, when every call of the claim carried token ids. */
export const TrainingSequence = z.object({
  /** The first prompt, then each completion and the new prompt tokens between turns. */
  tokens: z.array(z.number().int()),
  /** Tokens after the first prompt. */
  response_length: z.number().int().nonnegative(),
  /** Over the response: 1 on the model's own tokens, 0 on prompt tokens between turns. */
  loss_mask: z.array(z.number().int()),
  /** Over the response: the completion's logprobs, 0 on prompt tokens between turns. */
  rollout_log_probs: z.array(z.number()),
  /** Each completion's place in the response and the weight version it ran on. */
  segments: z.array(z.object({ start: z.number().int(), length: z.number().int(), weight_version: z.number().int().nullable() })),
  /**
   * Index of the first successful call whose prompt did not begin with the sequence so far, or
   * whose tokens are not known (truncated, recorded without them, uncaptured, prefix_missing), or
   * of the first call past those the trajectory answers (`calls_cut`); null when all spliced.
   */
  drift_at_call: z.number().int().nullable(),
});
export type TrainingSequence = z.infer<typeof TrainingSequence>;

/**
 * One successful call as a sample of its own, in slime's Sample field names: its whole prompt and
 * its completion, the loss over the completion. For a thinking model whose template drops earlier
 * thinking from the next prompt, whose turns never make one sequence (docs/ledger.md).
 */
export const TurnSample = z.object({
  /** The call's index among the claim's calls. */
  call_index: z.number().int().nonnegative(),
  /** The call's prompt ids, then its completion's. */
  tokens: z.array(z.number().int()),
  /** The completion's length: the last tokens. */
  response_length: z.number().int().nonnegative(),
  /** Over the completion: all 1. */
  loss_mask: z.array(z.number().int()),
  rollout_log_probs: z.array(z.number()),
  weight_version: z.number().int().nullable(),
});
export type TurnSample = z.infer<typeof TurnSample>;

export const Trajectory = z.object({
  ...TrajectorySummary.shape,
  /** null while the claim is live: its calls so far. */
  outcome: TrajectoryOutcomeView.nullable(),
  ended_at: z.number().int().nullable(),
  workflow_output: z.record(z.string(), z.unknown()).nullable(),
  calls: z.array(TrajectoryCall),
  /**
   * How many calls the ledger holds for the claim: more than `calls` when the claim has more than
   * a trajectory answers (2,000). (Absent from an exchange from before the field.)
   */
  calls_recorded: z.number().int().nonnegative().optional(),
  /**
   * `calls` are the claim's first 2,000 calls, not all of them: `prompt_tokens` and
   * `completion_tokens` are theirs, and `training` stops at the first call left out
   * (`drift_at_call` 2000). (Defaults to false for the typed client reading an exchange from
   * before the field.)
   */
  calls_cut: z.boolean().default(false),
  /** How the calls are written: `whole`, or `delta` (TrajectoryForm). (Defaults to `whole` for the typed client reading an exchange from before the field.) */
  form: TrajectoryForm.default("whole"),
  training: TrainingSequence.nullable(),
});
export type Trajectory = z.infer<typeof Trajectory>;
