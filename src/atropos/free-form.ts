/**
 * A scored group's free-form fields (messages, generation_params, overrides, group_overrides,
 * images) as Atropos answers them: json.dumps of what json.loads read, so a float sent as 1.0
 * comes back 1.0 and an int of any size digit for digit. JSON.parse then JSON.stringify would
 * write 1.0 as the int 1, and an int past 2^53 as the nearest double.
 *
 * Only for fields that hold an integral number (one such number could have been written either
 * way): their source text is found by one scan of the request (memberSources) and read again
 * with its numbers as written (http/python-json.ts exactJson). A group of long sequences is
 * megabytes of token ids, which neither is spent on.
 */
import { exactJson } from "../http/python-json";

export const FREE_FORM = ["messages", "generation_params", "overrides", "group_overrides", "images"] as const;
export type FreeFormField = (typeof FREE_FORM)[number];
/** Per free-form field, its JSON with the client's numbers; absent where JSON.stringify writes it the same. */
export type ExactFreeForm = Partial<Record<FreeFormField, string>>;

/** Whether `v` holds a number with an integral value (1, 1.0, 1e+16, 2^60): as JSON.stringify writes it, it may not be as sent. */
function holdsIntegral(v: unknown): boolean {
  if (typeof v === "number") return Number.isInteger(v);
  if (Array.isArray(v)) return v.some(holdsIntegral);
  if (typeof v === "object" && v !== null) return Object.values(v).some(holdsIntegral);
  return false;
}

/**
 * For each group of the request `text` (one object, or a list of them), its free-form fields
 * written with the client's numbers; null when no group needs it (the usual case).
 */
export function exactFreeForm(text: string, groups: readonly Partial<Record<FreeFormField, unknown>>[]): ExactFreeForm[] | null {
  const needed = groups.map((g) => FREE_FORM.filter((f) => holdsIntegral(g[f])));
  if (needed.every((fields) => fields.length === 0)) return null;
  const sources = memberSources(text, new Set(needed.flat()));
  return needed.map((fields, i) => {
    const out: ExactFreeForm = {};
    for (const f of fields) {
      const source = sources[i]?.[f];
      const exact = source === undefined ? null : exactJson(source);
      if (exact !== null) out[f] = exact;
    }
    return out;
  });
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * The source text of the members named `keys` of each object at the top of the JSON `text`: the
 * text itself when it is an object, each item when it is a list. One pass; strings are skipped
 * whole, and a key is read as JSON (escapes and all). A key given twice: its last value, as
 * JSON.parse takes. Assumes JSON.parse took `text`.
 */
export function memberSources(text: string, keys: ReadonlySet<string>): Record<string, string>[] {
  const out: Record<string, string>[] = [];
  let level = -1; // the depth of the objects whose members are wanted: 1 for an object, 2 in a list
  let depth = 0;
  let current: Record<string, string> | null = null;
  let expectKey = false;
  let key: string | null = null;
  let capture: { key: string; from: number } | null = null;
  const close = (at: number): void => {
    if (capture !== null && current !== null) current[capture.key] = text.slice(capture.from, at).trim();
    capture = null;
  };
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const start = i;
      for (i++; i < text.length && text.charCodeAt(i) !== QUOTE; i++) if (text.charCodeAt(i) === BACKSLASH) i++;
      if (depth === level && expectKey) {
        key = JSON.parse(text.slice(start, i + 1)) as string;
        expectKey = false;
      }
    } else if (c === 0x7b || c === 0x5b) {
      depth++;
      if (level < 0) level = c === 0x7b ? 1 : 2;
      if (c === 0x7b && depth === level) {
        current = {};
        out.push(current);
        expectKey = true;
      }
    } else if (c === 0x7d || c === 0x5d) {
      if (depth === level) close(i);
      depth--;
    } else if (depth === level) {
      if (c === 0x3a && key !== null) {
        if (keys.has(key)) capture = { key, from: i + 1 };
        key = null;
      } else if (c === 0x2c) {
        close(i);
        expectKey = true;
      }
    }
  }
  return out;
}
