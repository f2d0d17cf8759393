/**
 * The request bodies of Atropos's trajectory API (atroposlib/api/server.py, v0.4.0), as zod
 * schemas that accept what its pydantic models accept: pydantic v2's lax mode coerces a
 * numeric string or a bool to a number, and a float with no fractional part to an int, and
 * ignores unknown fields. Each refusal carries pydantic's error type and message in its
 * params, so the Worker answers with FastAPI's 422 body (atropos/fastapi-errors.ts).
 */
import { z } from "zod";
import { isRecord } from "./record";
import { openEnum } from "./open-enum";

/** A pydantic error: its type and message, and the input it refused. */
export type PydanticIssue = { type: string; msg: string; input: unknown };

/** A refusal, `at` the path below the field (a list's indexes), as pydantic's loc continues. */
type Refusal = PydanticIssue & { at: number[] };
type Parsed<T> = { ok: true; value: T } | { ok: false; issue: Refusal };
const refuse = (type: string, msg: string, input: unknown): Parsed<never> => ({ ok: false, issue: { type, msg, input, at: [] } });

/** pydantic's int from text: digits, and a fraction of zeros only ("2.0", "2.") stripped, as pydantic-core does. */
const INT_TEXT = /^\s*[+-]?\d+(_\d+)*(\.0*)?\s*$/;
const FLOAT_TEXT = /^\s*[+-]?(\d+(_\d+)*(\.(\d+(_\d+)*)?)?|\.\d+(_\d+)*)([eE][+-]?\d+)?\s*$|^\s*[+-]?(inf|infinity|nan)\s*$/i;

/**
 * An int a JSON number holds exactly. pydantic keeps any int (a Python int has no bound); here
 * -1e308 or 12345678901234567890 would be stored as some other int, or answered as a float:
 * refused, as pydantic words a bound (conint(ge=..., le=...)).
 */
const INT_MAX = Number.MAX_SAFE_INTEGER;

function inIntRange(n: number, input: unknown): Parsed<number> {
  if (n > INT_MAX) return refuse("less_than_equal", `Input should be less than or equal to ${INT_MAX}`, input);
  if (n < -INT_MAX) return refuse("greater_than_equal", `Input should be greater than or equal to ${-INT_MAX}`, input);
  return { ok: true, value: n };
}

function pyInt(v: unknown): Parsed<number> {
  if (typeof v === "boolean") return { ok: true, value: v ? 1 : 0 };
  if (typeof v === "number") {
    if (!Number.isFinite(v)) return refuse("finite_number", "Input should be a finite number", v);
    return Number.isInteger(v) ? inIntRange(v, v) : refuse("int_from_float", "Input should be a valid integer, got a number with a fractional part", v);
  }
  if (typeof v === "string") {
    if (INT_TEXT.test(v)) return inIntRange(Number(v.trim().replace(/_/g, "")), v);
    return refuse("int_parsing", "Input should be a valid integer, unable to parse string as an integer", v);
  }
  return refuse("int_type", "Input should be a valid integer", v);
}

function pyFloat(v: unknown): Parsed<number> {
  if (typeof v === "boolean") return { ok: true, value: v ? 1 : 0 };
  // JSON text as 1e999 parses to Infinity: refused, since no JSON answer could carry it back.
  if (typeof v === "number") return Number.isFinite(v) ? { ok: true, value: v } : refuse("finite_number", "Input should be a finite number", v);
  if (typeof v === "string") {
    const t = v.trim().replace(/_/g, "").toLowerCase();
    if (!FLOAT_TEXT.test(v)) return refuse("float_parsing", "Input should be a valid number, unable to parse string as a number", v);
    // JSON carries no infinities, so a stored score must be finite: refused as pydantic refuses them with allow_inf_nan=False.
    const n = t.endsWith("inf") || t.endsWith("infinity") || t.endsWith("nan") ? Number.NaN : Number(t);
    return Number.isFinite(n) ? { ok: true, value: n } : refuse("finite_number", "Input should be a finite number", v);
  }
  return refuse("float_type", "Input should be a valid number", v);
}

function pyStr(v: unknown): Parsed<string> {
  return typeof v === "string" ? { ok: true, value: v } : refuse("string_type", "Input should be a valid string", v);
}

/**
 * The most characters a name or path Atropos stores may have: 1,024. pydantic takes any str; here
 * the trainer's wandb group and project and checkpoint dir are rewritten with its state on every
 * scored request, and an env's name is held per env and answered by /register-env.
 */
export const MAX_ATROPOS_NAME_CHARS = 1024;

/** A str of at most `max` characters (code points, as Python counts them), refused as pydantic refuses constr(max_length=max). */
function pyStrAtMost(max: number): (v: unknown) => Parsed<string> {
  return (v) => {
    const r = pyStr(v);
    if (!r.ok || r.value.length <= max || [...r.value].length <= max) return r;
    return refuse("string_too_long", `String should have at most ${max} characters`, v);
  };
}

function pyDict(v: unknown): Parsed<Record<string, unknown>> {
  return isRecord(v) ? { ok: true, value: v } : refuse("dict_type", "Input should be a valid dictionary", v);
}

/** The JSON Schema of what a field takes, for the OpenAPI document: a parser says nothing of its type. */
type Described = { [key: string]: unknown };

/**
 * A field of pydantic type `parse`, described as `json`; `nullable` for Optional[...] = None
 * (missing or null gives null).
 */
function field<T>(parse: (v: unknown) => Parsed<T>, nullable: false, json: Described): z.ZodType<T>;
function field<T>(parse: (v: unknown) => Parsed<T>, nullable: true, json: Described): z.ZodOptional<z.ZodType<T | null>>;
function field<T>(parse: (v: unknown) => Parsed<T>, nullable: boolean, json: Described): z.ZodType<T | null | undefined> {
  const parsed = z.unknown().transform((v, ctx) => {
    if (v === undefined && !nullable) {
      ctx.addIssue({ code: "custom", message: "Field required", params: { type: "missing", msg: "Field required", input: undefined } });
      return z.NEVER;
    }
    if (v === undefined || (v === null && nullable)) return null;
    const r = parse(v);
    if (r.ok) return r.value;
    const { at, ...issue } = r.issue;
    ctx.addIssue({ code: "custom", message: issue.msg, path: at, params: issue });
    return z.NEVER;
  }) as unknown as z.ZodType<T | null>;
  // zod 4 refuses a missing key unless its schema is optional: an Optional[...] field may be left out (and reads as null).
  if (!nullable) return parsed.meta(json);
  return parsed.optional().meta(Object.keys(json).length === 0 ? json : { anyOf: [json, { type: "null" }] });
}

const INT: Described = { type: "integer", minimum: -INT_MAX, maximum: INT_MAX };
const NUMBER: Described = { type: "number" };
const STRING: Described = { type: "string" };
const DICT: Described = { type: "object" };
const listOf = (items: Described): Described => ({ type: "array", items });

/**
 * List[item]: every element parsed, the first refusal reported with its index. `taken` says of
 * an element that it is its own value (an int as an int, a finite number as a float): a list of
 * only such elements is returned as it is, without a call and an object per element, since
 * token and logprob lists run to thousands.
 */
function pyList<T>(item: (v: unknown) => Parsed<T>, taken?: (v: unknown) => boolean): (v: unknown) => Parsed<T[]> {
  return (v) => {
    if (!Array.isArray(v)) return refuse("list_type", "Input should be a valid list", v);
    if (taken !== undefined && v.every(taken)) return { ok: true, value: v as T[] };
    const out: T[] = new Array<T>(v.length);
    for (let i = 0; i < v.length; i++) {
      const r = item(v[i]);
      if (!r.ok) return { ok: false, issue: { ...r.issue, at: [i, ...r.issue.at] } };
      out[i] = r.value;
    }
    return { ok: true, value: out };
  };
}

const isInt = (v: unknown): boolean => Number.isSafeInteger(v);
const isFloat = (v: unknown): boolean => Number.isFinite(v);
const ints = pyList(pyInt, isInt);
const floats = pyList(pyFloat, isFloat);
const intList2 = pyList(ints);
const floatList2 = pyList(floats);
const intList3 = pyList(pyList(ints));
const floatList3 = pyList(pyList(floats));

/** ScoredData.messages: List[List[Dict]], each message with 'role' and 'content' (its field_validator, run before the type check). */
function messagesField(v: unknown): Parsed<Record<string, unknown>[][]> {
  if (Array.isArray(v)) {
    for (const list of v) {
      if (!Array.isArray(list)) continue;
      for (const msg of list) {
        if (isRecord(msg) && (!("role" in msg) || !("content" in msg))) {
          return refuse("value_error", "Value error, Message must have 'role' and 'content' fields", v);
        }
      }
    }
  }
  return pyList(pyList(pyDict))(v);
}

const anyValue = (v: unknown): Parsed<unknown> => ({ ok: true, value: v });

/**
 * The most sequences a batch, and so an env's group, may hold: 65,536, far above what Atropos's
 * trainers and environments use (batches of a few thousand sequences, groups of a few hundred).
 * A batch takes at most one group per sequence, and cutting it binds their ids as one JSON
 * string (17 bytes an id at most: 1.1 MB here), which the engine's SQLite holds up to 2 MB. A
 * group_size above every batch could never be in one, and matching buffered groups to it takes
 * memory and time in proportion to it (findGroupsSummingToTarget). pydantic takes any int.
 */
export const MAX_ATROPOS_BATCH_SIZE = 65_536;

/** An int of at most `max`, refused as pydantic refuses conint(le=max). */
function pyIntAtMost(max: number): (v: unknown) => Parsed<number> {
  return (v) => {
    const r = pyInt(v);
    return r.ok && r.value > max ? refuse("less_than_equal", `Input should be less than or equal to ${max}`, v) : r;
  };
}
const BATCH_INT: Described = { ...INT, maximum: MAX_ATROPOS_BATCH_SIZE };
const NAME: Described = { ...STRING, maxLength: MAX_ATROPOS_NAME_CHARS };
const name = pyStrAtMost(MAX_ATROPOS_NAME_CHARS);

/**
 * The most environments an engine registers between two trainer registrations: 10,000. Each is
 * a row read whenever batches are cut and groups are scored; Atropos runs have a few.
 */
export const MAX_ATROPOS_ENVS = 10_000;
const batchInt = pyIntAtMost(MAX_ATROPOS_BATCH_SIZE);

export const AtroposRegistration = z.object({
  wandb_group: field(name, false, NAME),
  wandb_project: field(name, false, NAME),
  batch_size: field(batchInt, false, BATCH_INT),
  max_token_len: field(pyInt, false, INT),
  checkpoint_dir: field(name, false, NAME),
  save_checkpoint_interval: field(pyInt, false, INT),
  starting_step: field(pyInt, false, INT),
  num_steps: field(pyInt, false, INT),
});
export type AtroposRegistration = z.output<typeof AtroposRegistration>;

export const AtroposRegisterEnv = z.object({
  max_token_length: field(pyInt, false, INT),
  desired_name: field(name, false, NAME),
  weight: field(pyFloat, false, NUMBER),
  group_size: field(batchInt, false, BATCH_INT),
  min_batch_allocation: field(pyFloat, true, NUMBER),
});
export type AtroposRegisterEnv = z.output<typeof AtroposRegisterEnv>;

export const AtroposEnvIdentifier = z.object({ env_id: field(pyInt, false, INT) });
export type AtroposEnvIdentifier = z.output<typeof AtroposEnvIdentifier>;

/** One scored group. Field order is the order Atropos's answers list them in (_scored_data_to_dict). */
export const AtroposScoredData = z.object({
  tokens: field(intList2, false, listOf(listOf(INT))),
  masks: field(intList2, false, listOf(listOf(INT))),
  scores: field(floats, false, listOf(NUMBER)),
  advantages: field(floatList2, true, listOf(listOf(NUMBER))),
  ref_logprobs: field(floatList2, true, listOf(listOf(NUMBER))),
  messages: field(messagesField, true, listOf(listOf(DICT))),
  generation_params: field(pyDict, true, DICT),
  inference_logprobs: field(floatList2, true, listOf(listOf(NUMBER))),
  overrides: field(pyList(pyDict), true, listOf(DICT)),
  group_overrides: field(pyDict, true, DICT),
  images: field(anyValue, true, {}),
  env_id: field(pyInt, true, INT),
  distill_token_ids: field(intList3, true, listOf(listOf(listOf(INT)))),
  distill_logprobs: field(floatList3, true, listOf(listOf(listOf(NUMBER)))),
});
export type AtroposScoredData = z.output<typeof AtroposScoredData>;

export const AtroposScoredDataList = z.array(AtroposScoredData);

const GIB = 1024 * 1024 * 1024;

/**
 * The least max_stored_bytes: 4 MiB. The latest example's row stays after its batch is taken
 * (as Atropos keeps it) until a newer group is queued. A request that queues one is bounded
 * without that row, which storing it frees; one whose groups all wait in an env's buffer frees
 * nothing, so with nothing else stored a group of 1,900,000 bytes must still fit beside another
 * such latest example, or it would be refused with a 503 for ever, however often its environment
 * retried. Groups larger than that, buffered, need a bound twice their size (docs/atropos.md).
 */
export const MIN_ATROPOS_STORED_BYTES = 4 * 1024 * 1024;

/**
 * The most max_stored_bytes may be: 6 GiB (6,442,450,944 bytes) of the 10 GB a Durable Object's
 * SQLite holds. The bound counts the groups' JSON only; the rest is for what the engine stores
 * beside it: each group's row header and index entries and its partly filled pages (some tens of
 * bytes a group, and at most a page), each group's trajectory record in the outbox until D1
 * takes it (its messages: up to a group's size again while D1 is unreachable), and the engine's
 * other tables (episodes, the rollout buffer, commands). At the 10 GB the object's writes fail,
 * for every API of the engine, not just this one.
 */
export const MAX_ATROPOS_STORED_BYTES = 6 * GIB;

/** The exchange's own settings for an engine's Atropos API (not part of Atropos's). */
export const AtroposConfig = z.object({
  /** Groups the engine holds at most (queued, buffered and cut); a scored group beyond it is refused 503. */
  max_groups: z.number().int().min(1).max(10_000_000),
  /**
   * Bytes of groups' JSON (UTF-8) the engine holds at most: every row of its Atropos table, the
   * groups max_groups counts, the latest example's and those of batches being sent. A scored
   * group that would pass it is refused 503, as one beyond max_groups is: one group may be megabytes,
   * so max_groups alone would let the store fill the object long before it refused anything.
   */
  max_stored_bytes: z.number().int().min(MIN_ATROPOS_STORED_BYTES).max(MAX_ATROPOS_STORED_BYTES),
});
export type AtroposConfig = z.infer<typeof AtroposConfig>;
export const UpdateAtroposConfigRequest = AtroposConfig.partial().strict();
/** 4 GiB by default: two thirds of the ceiling, room for the rest of the engine left over (MAX_ATROPOS_STORED_BYTES says what it holds). */
/** The Retry-After of a full queue's 503 (queue_full), which Atropos's BaseEnv retries. */
export const ATROPOS_RETRY_AFTER_SECONDS = 5;

export const DEFAULT_ATROPOS_CONFIG: AtroposConfig = { max_groups: 200_000, max_stored_bytes: 4 * GIB };

/** Why batches may not be cut although groups wait: the extra field of /status (and the engine's views). */
export const AtroposStall = z.object({
  kind: openEnum(["larger_than_batch", "never_packed", "stuck_in_buffer", "minimum_unmet", "batch_size_unreachable", "no_env_id"]),
  groups: z.number().int(),
  detail: z.string(),
});
export type AtroposStall = z.infer<typeof AtroposStall>;

/** The engine's views of its Atropos API (the overview and the dashboard). */
export const AtroposOverview = z.object({
  /** A trainer has registered a run (POST /atropos/register). */
  registered: z.boolean(),
  current_step: z.number().int(),
  batch_size: z.number().int(),
  queued_groups: z.number().int(),
  /** Every group held: queued, buffered, set aside or cut. */
  stored_groups: z.number().int(),
  max_groups: z.number().int(),
  /** Bytes of the groups' JSON in the engine's store: those held, the latest example's and those of batches being sent. */
  stored_bytes: z.number().int(),
  max_stored_bytes: z.number().int(),
  environments: z.number().int(),
  stalls: z.array(AtroposStall),
});
export type AtroposOverview = z.infer<typeof AtroposOverview>;
