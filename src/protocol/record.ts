/** Whether a value is an object with keys, as JSON's `{...}` parses: not null, not an array. */
export const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
