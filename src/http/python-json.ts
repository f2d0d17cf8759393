/**
 * JSON as Python writes it: json.dumps's default (allow_nan=True) writes float("nan") and
 * float("inf") as the bare tokens NaN, Infinity and -Infinity, which the seeds' servers read
 * (json.loads) and JSON.parse refuses. Read here only once JSON.parse has refused a body.
 */
const isJsonSpace = (c: number): boolean => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
/** What may come before a value in JSON text: the start, whitespace, `[`, `,` or `:`. */
const opensValue = (c: number): boolean => Number.isNaN(c) || isJsonSpace(c) || c === 0x5b || c === 0x2c || c === 0x3a;
/** What may come after one: the end, whitespace, `,`, `]` or `}`. */
const closesValue = (c: number): boolean => Number.isNaN(c) || isJsonSpace(c) || c === 0x2c || c === 0x5d || c === 0x7d;

/**
 * NaN's stand-in is a one-character string of a character the text holds nowhere, raw or
 * escaped: DEL or a C1 control (U+007F to U+009F), which JSON strings may hold raw and no real
 * text does. One character keeps the rewritten text no longer than the original, and Latin-1
 * keeps it a one-byte string.
 */
const SENTINEL_FIRST = 0x7f;
const SENTINEL_LAST = 0x9f;

/**
 * A stand-in for NaN that no string of the text can equal, or null if the text holds every
 * candidate. Any occurrence counts, in a string or not, and so does anything that looks like an
 * escape of one (`\\u0080` too, which is a backslash and text): only the candidates are fewer.
 */
function freeSentinel(text: string): string | null {
  const seen = new Uint8Array(SENTINEL_LAST - SENTINEL_FIRST + 1);
  const see = (c: number): void => {
    if (c >= SENTINEL_FIRST && c <= SENTINEL_LAST) seen[c - SENTINEL_FIRST] = 1;
  };
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x5c && text.charCodeAt(i + 1) === 0x75) {
      const hex = text.slice(i + 2, i + 6);
      if (/^[0-9a-fA-F]{4}$/.test(hex)) see(parseInt(hex, 16));
    } else see(c);
  }
  const free = seen.indexOf(0);
  return free < 0 ? null : String.fromCharCode(SENTINEL_FIRST + free);
}

/** Pieces of the rewritten text joined into it every so often: a body of a million NaNs holds no array of millions of strings. */
const JOIN_EVERY = 4096;

/**
 * JSON text as Python's json.dumps writes it (allow_nan=True, its default): float("nan") and
 * float("inf") as the bare tokens NaN, Infinity and -Infinity. aiohttp, httpx before 0.28 and
 * Atropos's BaseEnv send them, and the seeds read them (json.loads); JSON.parse refuses them.
 * Called only once JSON.parse has refused the text: two passes (linear; brackets were already
 * bounded by nestsDeeperThan, and the rewritten text is no longer than the original) rewrite each
 * such token outside strings, between a value's delimiters, and JSON.parse reads the result.
 * Infinity and -Infinity become 1e999 and -1e999, which JSON.parse itself reads as ±Infinity;
 * NaN becomes a string no value of the text can equal, which a reviver turns back into NaN. Then
 * the schemas decide: a typed number refuses NaN and ±Infinity (zod's z.number(), Atropos's
 * pyFloat) with a 422 naming its field, and free-form JSON keeps them, written as null wherever
 * it is stored (JSON.stringify), as the seeds' pydantic model_dump_json did. Null when the text
 * is not JSON even so (its first error stands).
 */
export function parsePythonJson(text: string): { value: unknown } | null {
  let sentinel: string | null | undefined;
  let out = "";
  let parts: string[] = [];
  let from = 0;
  let rewritten = false;
  let nans = false;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) {
      inString = true;
      continue;
    }
    const token = c === 0x4e ? "NaN" : c === 0x49 ? "Infinity" : c === 0x2d ? "-Infinity" : null;
    if (token === null || !text.startsWith(token, i)) continue;
    // A token inside another (1Infinity would become the number 11e999) is left for JSON.parse to refuse.
    if (!opensValue(text.charCodeAt(i - 1)) || !closesValue(text.charCodeAt(i + token.length))) continue;
    if (token === "NaN") {
      sentinel ??= freeSentinel(text);
      // Every candidate is in the text (which no client writes): its NaN could not be told apart.
      if (sentinel === null) return null;
      nans = true;
    }
    parts.push(text.slice(from, i), token === "NaN" ? `"${sentinel}"` : token === "Infinity" ? "1e999" : "-1e999");
    rewritten = true;
    from = i + token.length;
    i = from - 1;
    if (parts.length >= JOIN_EVERY) {
      out += parts.join("");
      parts = [];
    }
  }
  if (!rewritten) return null;
  out += parts.join("") + text.slice(from);
  try {
    if (!nans) return { value: JSON.parse(out) as unknown };
    return {
      value: JSON.parse(out, (key, value: unknown) => {
        // NaN where a key goes ({"a": 1, NaN: 2}) is no JSON, in Python's either.
        if (key === sentinel) throw new SyntaxError("NaN as a key");
        return value === sentinel ? Number.NaN : value;
      }) as unknown,
    };
  } catch {
    return null;
  }
}

/** JSON.parse, and Python's NaN and ±Infinity (parsePythonJson) when JSON.parse refuses the text; throws JSON.parse's error for text that is neither. */
export function parseRequestJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    const python = parsePythonJson(text);
    if (python === null) throw e;
    return python.value;
  }
}

/** What JSON.parse's reviver is also given (source text access, in V8 since 11.4), and JSON.rawJSON. */
type SourceContext = { source?: string };
const rawJSON = (JSON as unknown as { rawJSON: (text: string) => unknown }).rawJSON;
/**
 * A number literal JSON.stringify would not write back as the text has it, in a way Python
 * tells apart: an integer long enough that a double may not hold it, or a float with an integral
 * value (2.0, 1e+16), which it writes as an int.
 */
const CHANGED_NUMBER = /(?:^|[^0-9.eE+-])-?\d{16,}(?![0-9.eE])|\d\.0+(?![0-9])|\d[eE]\+?\d/;
const INTEGER_SOURCE = /^-?\d+$/;
const FLOAT_SOURCE = /[.eE]/;

/**
 * The source of a number JSON.stringify would write otherwise, as Python reads it: an integer
 * outside a double's exact range (Python's ints have any size), or a float JSON.stringify would
 * write as an integer (Python reads that as an int).
 */
function keptSource(value: number, source: string): boolean {
  if (INTEGER_SOURCE.test(source)) return !Number.isSafeInteger(value);
  return Number.isFinite(value) && FLOAT_SOURCE.test(source) && !FLOAT_SOURCE.test(String(value));
}

/**
 * `key`'s value in the JSON object `text`, written again with its numbers as Python reads the
 * text: Python writes ints of any size digit for digit (a time.time_ns() stamp, a 64-bit id or
 * seed), and a double holds only those up to 2^53; it writes a float 2.0 as `2.0`, which
 * JSON.stringify writes as the int `2`. So JSON.parse then JSON.stringify changes them. Null when
 * it would come out as JSON.stringify writes it anyway, or the text is no such object (Python's
 * NaN included: its value is then written as usual).
 */
export function exactNumbers(text: string, key: string): string | null {
  const parsed = exactValue(text);
  if (typeof parsed !== "object" || parsed === null || !(key in parsed)) return null;
  return JSON.stringify((parsed as Record<string, unknown>)[key]);
}

/**
 * The JSON `text` as JSON.stringify writes it with its numbers as Python reads them (as
 * exactNumbers); null when JSON.stringify would write it so anyway, or it is no JSON.
 */
export function exactJson(text: string): string | null {
  const parsed = exactValue(text);
  return parsed === undefined ? null : JSON.stringify(parsed);
}

/** `text` parsed with the numbers JSON.stringify would change as JSON.rawJSON of their source; undefined when there are none, or it is no JSON. */
function exactValue(text: string): unknown {
  if (!CHANGED_NUMBER.test(text)) return undefined;
  try {
    return JSON.parse(text, function (_k: string, value: unknown, context?: SourceContext) {
      const source = context?.source;
      return typeof value === "number" && source !== undefined && keptSource(value, source) ? rawJSON(source) : value;
    } as (this: unknown, k: string, v: unknown) => unknown);
  } catch {
    return undefined;
  }
}
