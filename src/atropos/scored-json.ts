/**
 * A scored group as Atropos answers it in /batch and /latest_example (its _scored_data_to_dict):
 * every field, in its order, null where not sent; float fields written as Python writes floats
 * (a whole number keeps its ".0"), so a trainer reading the JSON gets floats where Atropos gave
 * floats. Built in the Worker, once per group: the engine stores and returns this text as is.
 */
import type { AtroposScoredData } from "../protocol/atropos";
import { storedStringTooLarge, utf8Bytes } from "../protocol/limits";
import type { AtroposGroup } from "../engine/atropos-hub";
import type { ExactFreeForm } from "./free-form";

/** A float as Python's json writes it: 1 -> "1.0", -0 -> "-0.0"; other values as JavaScript writes them, which parse to the same float. */
export function pyFloatJson(x: number): string {
  if (Object.is(x, -0)) return "-0.0";
  const t = String(x);
  return Number.isInteger(x) && !t.includes("e") ? `${t}.0` : t;
}

/** An answer's JSON text with the `floats` fields written as Python writes floats: Atropos computes them as floats (its /status-env). */
export function withPyFloats<T extends Record<string, unknown>>(v: T, floats: readonly (keyof T & string)[]): string {
  const entries = Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}:${floats.includes(k) && typeof x === "number" ? pyFloatJson(x) : JSON.stringify(x)}`);
  return `{${entries.join(",")}}`;
}

const floats = (xs: number[]): string => `[${xs.map(pyFloatJson).join(",")}]`;
const nested = <T>(xs: T[] | null | undefined, inner: (x: T) => string): string => (xs == null ? "null" : `[${xs.map(inner).join(",")}]`);
const json = (v: unknown): string => JSON.stringify(v) ?? "null";

/** The group's JSON text, as Atropos's answers hold it; `exact`: free-form fields with the client's numbers (free-form.ts). */
export function scoredJson(d: AtroposScoredData, exact: ExactFreeForm = {}): string {
  const free = (f: keyof ExactFreeForm): string => exact[f] ?? json(d[f]);
  const floats2 = (xs: number[][] | null | undefined) => nested(xs, floats);
  const floats3 = (xs: number[][][] | null | undefined) => nested(xs, (x) => nested(x, floats));
  return (
    `{"tokens":${json(d.tokens)},"masks":${json(d.masks)},"scores":${floats(d.scores)},` +
    `"advantages":${floats2(d.advantages)},"ref_logprobs":${floats2(d.ref_logprobs)},"messages":${free("messages")},` +
    `"generation_params":${free("generation_params")},"inference_logprobs":${floats2(d.inference_logprobs)},` +
    `"overrides":${free("overrides")},"group_overrides":${free("group_overrides")},"images":${free("images")},` +
    `"env_id":${json(d.env_id)},"distill_token_ids":${json(d.distill_token_ids)},"distill_logprobs":${floats3(d.distill_logprobs)}}`
  );
}

/**
 * The group's trajectory record for D1 (the trajectories table's workflow_output): its scores,
 * env and size, and its messages when it has them, but not its token ids, masks or logprobs,
 * which are the trainer's input and would make every record the size of the group. A record
 * whose messages would not fit a row goes without them; one whose scores and sequence lengths
 * alone would not (a group of a hundred thousand sequences) has their mean as its reward, and
 * says what it left out.
 */
export function trajectorySummary(d: AtroposScoredData): string {
  const metadata = {
    source: "atropos",
    env_id: d.env_id ?? null,
    group_size: d.tokens.length,
    sequence_lengths: d.tokens.map((t) => t.length),
    generation_params: d.generation_params ?? null,
    group_overrides: d.group_overrides ?? null,
  };
  const whole = json({ reward: d.scores, is_success: null, metadata: { ...metadata, messages: d.messages ?? null }, log_metrics: {} });
  if (storedStringTooLarge("the trajectory", whole) === null) return whole;
  const unheard = json({ reward: d.scores, is_success: null, metadata: { ...metadata, messages_omitted: true }, log_metrics: {} });
  if (storedStringTooLarge("the trajectory", unheard) === null) return unheard;
  const omitted = ["messages", "scores", "sequence_lengths", "generation_params", "group_overrides"];
  const least = { source: metadata.source, env_id: metadata.env_id, group_size: metadata.group_size, messages_omitted: true, omitted };
  return json({ reward: meanScore(d.scores), is_success: null, metadata: least, log_metrics: {} });
}

/** A group's reward as the engine counts it: its scores' mean, null for none. */
export const meanScore = (scores: readonly number[]): number | null => (scores.length === 0 ? null : scores.reduce((a, x) => a + x, 0) / scores.length);

/**
 * The most a request's groups may be as they go to the engine, their JSON and their trajectory
 * records: one RPC value may be 32 MiB. A request inflates to at most 16 MiB, which its groups
 * pass only where they gain a ".0" on each of many whole scores.
 */
export const MAX_SCORED_REQUEST_BYTES = 24 * 1024 * 1024;

/** Why a request's groups cannot go to the engine (more than MAX_SCORED_REQUEST_BYTES), or null. */
export function groupsTooLarge(groups: AtroposGroup[]): string | null {
  let bytes = 0;
  for (const g of groups) bytes += g.bytes + utf8Bytes(g.summary);
  if (bytes <= MAX_SCORED_REQUEST_BYTES) return null;
  return `the scored groups are ${bytes} bytes as JSON with their trajectory records; one request may carry at most ${MAX_SCORED_REQUEST_BYTES}: send fewer groups per request`;
}

/** What the engine gets for one group. Its bytes are counted here, in the Worker, for the engine's bound on the bytes it holds (max_stored_bytes). */
export function toGroup(d: AtroposScoredData, exact: ExactFreeForm = {}): AtroposGroup {
  const reward = meanScore(d.scores);
  const payload = scoredJson(d, exact);
  return { env_id: d.env_id ?? null, size: d.tokens.length, payload, bytes: utf8Bytes(payload), reward, summary: trajectorySummary(d) };
}
