/**
 * What Atropos's trajectory API answers (atroposlib/api/server.py, v0.4.0), as the engine sends
 * it: the engine's hub builds its answers to these types, and the OpenAPI document describes
 * them from these schemas (src/atropos/openapi.ts). Atropos's quirks are kept, so they are
 * here too: a failure told as a 200 with a `status`, a "not registered" batch that is an empty
 * list, an empty example whose `generation_params` is a list.
 */
import { z } from "zod";
import { AtroposStall } from "./atropos";

const int = z.number().int();
const ints2 = z.array(z.array(int));
const floats2 = z.array(z.array(z.number()));
const dict = z.record(z.string(), z.unknown());

export const AtroposRoot = z.object({ message: z.string() });

/**
 * uuid.uuid4().int: a 128-bit integer, as a JSON number with every digit. Described as a whole
 * number, not as an `integer`: that reads as 64 bits to most client generators, and as 53 to zod.
 */
export const AtroposRegistered = z.object({ uuid: z.number().multipleOf(1) });

/** -1 for both until a trainer registers. */
export const AtroposInfo = z.object({ batch_size: int, max_token_len: int });

export const AtroposWandbInfo = z.object({ group: z.string().nullable(), project: z.string().nullable() });

/** A scored group as /batch and /latest_example hand it out: every field, null where it was not sent. */
export const AtroposScoredGroup = z.object({
  tokens: ints2,
  masks: ints2,
  scores: z.array(z.number()),
  advantages: floats2.nullable(),
  ref_logprobs: floats2.nullable(),
  messages: z.array(z.array(dict)).nullable(),
  generation_params: dict.nullable(),
  inference_logprobs: floats2.nullable(),
  overrides: z.array(dict).nullable(),
  group_overrides: dict.nullable(),
  images: z.unknown(),
  env_id: int.nullable(),
  distill_token_ids: z.array(ints2).nullable(),
  distill_logprobs: z.array(floats2).nullable(),
});

/** The next batch (null while none is ready), or Atropos's error before a trainer registers. */
export const AtroposBatch = z.union([
  z.object({ batch: z.array(AtroposScoredGroup).nullable() }),
  z.object({ status: z.literal("error"), message: z.string(), batch: z.tuple([]) }),
]);

/** The latest group queued, or this shape before there is one. */
export const AtroposNoExample = z.object({
  tokens: z.tuple([]),
  masks: z.tuple([]),
  scores: z.tuple([]),
  advantages: z.tuple([]),
  ref_logprobs: z.tuple([]),
  generation_params: z.tuple([]),
  inference_logprobs: z.tuple([]),
  messages: z.tuple([]),
  images: z.tuple([]),
});
export const AtroposLatestExample = z.union([AtroposScoredGroup, AtroposNoExample]);

/** An environment's registration, or Atropos's answer before the trainer has taken its first batch. */
export const AtroposEnvRegistered = z.union([
  z.object({ status: z.literal("wait for trainer to start") }),
  z.object({
    status: z.literal("success"),
    env_id: int,
    wandb_name: z.string(),
    checkpoint_dir: z.string(),
    starting_step: int,
    checkpoint_interval: int,
    num_steps: int,
  }),
]);

/** `error` is the Python exception's text, as Atropos returns it. */
export const AtroposEnvDisconnected = z.union([z.object({ status: z.literal("success") }), z.object({ status: z.literal("failure"), error: z.string() })]);

/** `buffered`: the group waits in its env's buffer for others that make up the env's group size. */
export const AtroposScoredReceived = z.union([z.object({ status: z.literal("received") }), z.object({ status: z.literal("buffered"), buffer_size: int })]);

export const AtroposScoredListReceived = z.object({
  status: z.literal("received"),
  groups_processed: int,
  /** Present when some groups were buffered. */
  buffered: int.optional(),
  last_buffer_size: int.optional(),
});

/** Atropos's /status, with the exchange's `stalls`: what keeps queued groups from being taken. */
export const AtroposStatus = z.object({ current_step: int, queue_size: int, stalls: z.array(AtroposStall) });

export const AtroposEnvStatus = z.object({
  current_step: int,
  queue_size: int,
  unallocated_fraction: z.number(),
  self_queue_size: int,
  max_group_size: int,
  env_weight: z.number(),
});

/** Atropos's plain-text answers: /reset_data's 200, and the 500 Starlette sends where Atropos's handler raises. */
export const ATROPOS_RESET_TEXT = "Reset successful";
export const ATROPOS_SERVER_ERROR_TEXT = "Internal Server Error";
