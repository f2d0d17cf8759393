import { z } from "zod";

/** At most this long: a value is a word or two, and the reader shows or stores it as it came. */
const MAX_VALUE_LENGTH = 64;

/**
 * A field one side reads of what the other sends, whose values the other may add to in a
 * newer version: a run's status in an answer, a trainer's state in a heartbeat. Any short
 * string is read, so that a peer one version newer is not refused whole for one value (the
 * Worker is deployed before the agents on the GPU hosts, and SDKs stay pinned); TypeScript
 * still offers the known values. Requests whose value the receiver acts on keep z.enum and
 * are refused for a value it does not know: that is a wrong value, not a newer one.
 */
export function openEnum<const T extends readonly [string, ...string[]]>(values: T): z.ZodType<T[number] | (string & {})> {
  // The API document lists the values this version knows, as z.enum's would.
  return z
    .string()
    .min(1)
    .max(MAX_VALUE_LENGTH)
    .describe(`One of ${values.map((v) => JSON.stringify(v)).join(", ")}, or a value a newer version added.`);
}
