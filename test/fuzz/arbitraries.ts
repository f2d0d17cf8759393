/**
 * Requests generated from the OpenAPI document: for every documented path and method (both the
 * bearer form and the token-in-path form), the OpenAI-compatible relay's with claim keys and
 * chat bodies of their own. Bodies start from the operation's schema and are then broken:
 * malformed JSON, wrong types, missing and extra fields, deep nesting, oversized, invalid UTF-8,
 * odd unicode in any string. Tokens come from every role, from nobody, from another engine, or
 * are bogus, revoked or malformed; methods are sometimes ones the path does not have.
 *
 * A request is plain data (printable, so fast-check can show and shrink it); ids the exchange
 * makes up when the world is built (tokens, run ids, claim keys) appear as world references
 * and are resolved only when the request is sent (world.ts).
 */
import fc from "fast-check";
import { z } from "zod";
import { toJsonSchema } from "../../src/openapi/json-schema";
import { PROTOCOL_VERSIONS } from "../../src/runs/mcp/jsonrpc";
import { TOOLS } from "../../src/runs/mcp/tools";
import { ROLES, type Role } from "../../src/protocol/admin";
import { seedsFor } from "./seeds";
import { bodySchemaOf, component, METHODS, parametersOf, type Doc, type Method, type Operation, type Parameter, type Schema } from "./document";

// ------------------------------------------------------------------ requests

/** A value the world makes up: resolved when the request is sent. */
export type WorldKey =
  | "engine"
  | "foreignEngine"
  | "runId"
  | "testId"
  | "revokedToken"
  | "revokedTokenId"
  | "claimKey"
  | "staleClaimKey"
  | `token:${Role | "admin"}`
  | `foreignToken:${Role}`
  | `tokenId:${Role}`;
export type Value = { world: WorldKey } | { literal: string };

export type Body =
  | { kind: "none" }
  | { kind: "json"; value: unknown }
  | { kind: "text"; text: string }
  /** Invalid UTF-8: the JSON text's bytes with a stray byte in them. */
  | { kind: "bytes"; text: string; at: number; byte: number }
  /** The JSON value with a field that takes the body past the size limit; sent whole or in chunks (no length). */
  | { kind: "oversized"; value: unknown; chunked: boolean };

/** How the errors of a target look when it refuses. */
export type ErrorShape = "exchange" | "openai";

export type FuzzRequest = {
  /** `post /e/{engine}/claim_episode`: the documented path and method, or a relay route. */
  target: string;
  /** The path template, e.g. `/e/{engine}/t/{token}/claim_episode`. */
  path: string;
  method: Uppercase<Method>;
  /** Whether the document lists this method for this path (a relay request is made without it). */
  documented: boolean;
  params: Record<string, Value>;
  query: [string, string][];
  authorization: { scheme: string; value: Value; suffix: string } | null;
  headers: Record<string, string>;
  body: Body;
  /** What was done to the request, for the report. */
  mutation: string;
};

export type Target = {
  key: string;
  path: string;
  method: Method;
  op: Operation | undefined;
  shape: ErrorShape;
  arbitrary: fc.Arbitrary<FuzzRequest>;
};

// ------------------------------------------------------------------ strings

/** Values the world holds, so generated strings sometimes name real episodes, clients, tasks, groups. */
export const DICTIONARY = ["ep-0", "ep-1", "ep-2", "ep-3", "ep-😀", "c-1", "c-2", "c-😀", "t-1", "t-2", "task_id", "g-1", "g-2", "s-1", "s-2", "s-3", "call-w-2a", "call-w-2b", "gsm8k", "countdown", "group_size", "temperature", "max_token_length", "env", "trainer", "openai"];

const LONG = 70_000;

/** Strings that trip naive code: lone surrogates, NUL, bidi controls, 4-byte emoji, combining marks, very long ones. */
export const oddString: fc.Arbitrary<string> = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(
    "\ud800",
    "a\udc00b",
    "\udbff\udfff\ud800",
    "\u0000",
    "nul\u0000inside",
    "\u202eevil\u202c",
    "\u200f\u200e\u2066x\u2069",
    "😀",
    "👩‍👩‍👧‍👦",
    "𝕏𝕐",
    "\ufeffbom",
    "\u2028\u2029",
    "e\u0301\u0301\u0301",
    "\r\n\t",
    "\\",
    '"',
    "%00%2F%zz",
    "../..",
    "' OR 1=1 --",
    "<script>",
    " ",
    "",
  ) },
  { weight: 3, arbitrary: fc.string({ unit: "binary", maxLength: 12 }) },
  { weight: 1, arbitrary: fc.constantFrom("x", "😀", "\ud800", "\u0000").map((u) => u.repeat(LONG)) },
);

/** A JSON value of any shape, strings odd or not. */
const anyJson: fc.Arbitrary<unknown> = fc.letrec<{ json: unknown }>((tie) => ({
  json: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constant(null),
    fc.boolean(),
    fc.integer(),
    fc.double(),
    fc.constantFrom(-0, 1e308, -1e308, 2 ** 53, 5e-324),
    fc.oneof(fc.constantFrom(...DICTIONARY), oddString),
    fc.array(tie("json"), { maxLength: 3 }),
    fc.dictionary(fc.oneof(fc.constantFrom(...DICTIONARY), oddString), tie("json"), { maxKeys: 3 }),
  ),
})).json;

// ------------------------------------------------------------------ values from schemas

const MAX_REFS = 3;

function resolve(doc: Doc, s: Schema): Schema {
  return typeof s["$ref"] === "string" ? component<Schema>(doc, s["$ref"]) : s;
}

const num = (v: unknown): number | undefined => (typeof v === "number" ? v : undefined);

function strings(s: Schema): fc.Arbitrary<string> {
  const min = num(s["minLength"]) ?? 0;
  const max = num(s["maxLength"]) ?? 64;
  if (typeof s["pattern"] === "string") return fc.oneof({ weight: 6, arbitrary: fc.stringMatching(new RegExp(s["pattern"])) }, { weight: 1, arbitrary: oddString });
  // Only loopback addresses: a URL the exchange accepts may be fetched later (an agent's gateway).
  if (s["format"] === "uri") return fc.constantFrom("http://127.0.0.1:9/v1", "https://127.0.0.1:9/", "http://[::1]:9/x", "ftp://127.0.0.1:9/", "a:b");
  const words = DICTIONARY.filter((w) => w.length >= min && w.length <= max);
  return fc.oneof(
    { weight: 4, arbitrary: words.length > 0 ? fc.constantFrom(...words) : fc.string({ minLength: min, maxLength: Math.min(max, min + 8) }) },
    { weight: 3, arbitrary: fc.string({ minLength: min, maxLength: Math.max(min, Math.min(max, 24)) }) },
    { weight: 1, arbitrary: oddString },
  );
}

function numbers(s: Schema, integer: boolean): fc.Arbitrary<number> {
  const exclusiveMin = num(s["exclusiveMinimum"]);
  const min = num(s["minimum"]) ?? (exclusiveMin !== undefined ? exclusiveMin + (integer ? 1 : 0) : -1e9);
  const max = num(s["maximum"]) ?? 1e9;
  const edges = [min, max, 0, 1, -1].filter((v) => v >= min && v <= max && (exclusiveMin === undefined || v > exclusiveMin));
  const within = integer
    ? fc.integer({ min: Math.max(min, -(2 ** 31)), max: Math.min(max, 2 ** 31 - 1) })
    : fc.double({ min, max, noNaN: true, noDefaultInfinity: true, minExcluded: exclusiveMin !== undefined && min === exclusiveMin });
  return edges.length > 0 ? fc.oneof({ weight: 4, arbitrary: within }, { weight: 1, arbitrary: fc.constantFrom(...edges) }) : within;
}

function objects(doc: Doc, s: Schema, refs: number): fc.Arbitrary<unknown> {
  const props = (s["properties"] ?? {}) as Record<string, Schema>;
  const required = (s["required"] ?? []) as string[];
  const model: Record<string, fc.Arbitrary<unknown>> = {};
  for (const [name, p] of Object.entries(props)) model[name] = valueOf(doc, p, refs);
  const known = fc.record(model, { requiredKeys: required.filter((k) => k in model) });
  const extra = s["additionalProperties"];
  if (typeof extra !== "object" || extra === null) return known;
  // A map (record) or an object with free-form fields beside its own.
  const keys = typeof s["propertyNames"] === "object" && s["propertyNames"] !== null ? strings(resolve(doc, s["propertyNames"] as Schema)) : fc.constantFrom(...DICTIONARY);
  const more = fc.dictionary(keys, valueOf(doc, extra as Schema, refs), { maxKeys: Object.keys(props).length > 0 ? 1 : 3 });
  return fc.tuple(more, known).map(([m, k]) => ({ ...m, ...(k as object) }));
}

/**
 * Values of a schema: valid ones mostly, and strings that are sometimes odd (and so maybe too
 * long). `refs` counts the $refs followed to get here: the shared JSON value schema refers to
 * itself, and a few levels of it are enough.
 */
export function valueOf(doc: Doc, schema: Schema, refs = 0): fc.Arbitrary<unknown> {
  if (typeof schema["$ref"] === "string") return refs >= MAX_REFS ? fc.constantFrom(null, 0, "", "deep") : valueOf(doc, resolve(doc, schema), refs + 1);
  const s = schema;
  if ("const" in s) return fc.constant(s["const"]);
  if (Array.isArray(s["enum"])) return fc.constantFrom(...(s["enum"] as unknown[]));
  const union = (s["anyOf"] ?? s["oneOf"]) as Schema[] | undefined;
  if (union) return fc.oneof(...union.map((u) => valueOf(doc, u, refs)));
  const type = s["type"];
  if (Array.isArray(type)) return fc.oneof(...type.map((t) => valueOf(doc, { ...s, type: t }, refs)));
  switch (type) {
    case "string":
      return strings(s);
    case "number":
      return numbers(s, false);
    case "integer":
      return numbers(s, true);
    case "boolean":
      return fc.boolean();
    case "null":
      return fc.constant(null);
    case "array": {
      const minLength = num(s["minItems"]) ?? 0;
      const maxLength = Math.min(num(s["maxItems"]) ?? 3, Math.max(minLength, 3));
      return fc.array(valueOf(doc, (s["items"] ?? {}) as Schema, refs), { minLength, maxLength });
    }
    case "object":
      return objects(doc, s, refs);
    default:
      return anyJson;
  }
}

// ------------------------------------------------------------------ breaking a body

type Path = (string | number)[];

/** Every place in a JSON value, the root included. */
function pathsOf(v: unknown, at: Path = [], out: Path[] = []): Path[] {
  out.push(at);
  if (Array.isArray(v)) v.forEach((x, i) => pathsOf(x, [...at, i], out));
  else if (typeof v === "object" && v !== null) for (const [k, x] of Object.entries(v)) pathsOf(x, [...at, k], out);
  return out;
}

/** A copy of `v` with `f` applied at `path` (f gets the parent and the key; the root has no parent). */
function edit(v: unknown, path: Path, f: (parent: Record<string | number, unknown>, key: string | number) => void): unknown {
  const copy: unknown = structuredClone(v);
  if (path.length === 0) return copy;
  let parent = copy as Record<string | number, unknown>;
  for (const k of path.slice(0, -1)) parent = parent[k] as Record<string | number, unknown>;
  f(parent, path[path.length - 1] as string | number);
  return copy;
}

const wrongValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(null, true, false, 0, -1, 1.5, -0, 1e308, 2 ** 63, "", "1", "true", "null", [], {}, [null], { "": null }),
  oddString,
  anyJson,
);

/** Keys to add: a known word, an odd one, or one that means something to JavaScript objects. */
const extraKey = fc.oneof(fc.constantFrom(...DICTIONARY), oddString, fc.constantFrom("__proto__", "constructor", "prototype", "toString", "hasOwnProperty"));

/** An own property, even for `__proto__` (plain assignment would set the prototype instead). */
function setOwn(o: Record<string | number, unknown>, key: string | number, value: unknown): void {
  Object.defineProperty(o, key, { value, enumerable: true, writable: true, configurable: true });
}

/**
 * Stands for arrays nested `depth` deep, written into the JSON text only when it is sent (world.ts):
 * JSON.parse copes with any depth, recursive code after it may not, and a JavaScript value that
 * deep could not be serialized here either.
 */
export const deepMarker = (depth: number): string => `\u0001nested ${depth} deep\u0001`;
export const DEEP_MARKER = /"\\u0001nested (\d+) deep\\u0001"/g;

/** Numbers at the edges: the largest and smallest doubles, the largest safe integer, -0. */
const EXTREMES = [0, -0, -1, 2 ** 31, 2 ** 53 - 1, -(2 ** 53 - 1), 1e308, -1e308, 5e-324, 0.1 + 0.2];

const MALFORMED = ["", " ", "{", "[", "}", "nul", "{'a': 1}", '{"a": NaN}', '{"a": 1,}', '{"a": 01}', '{"a": 1}{"b": 2}', "\ufeff{}", '{"a": "\\x41"}', '{"a": "unterminated', "[1, 2,]", "undefined"];
const NOT_OBJECTS = ["null", "true", "0", "-1e999", '"a string"', "[]", "[{}]", '[{"a": 1}]'];

function broken(valid: fc.Arbitrary<unknown>): fc.Arbitrary<{ body: Body; mutation: string }> {
  const at = <T>(f: (v: unknown, path: Path, x: T) => { body: Body; mutation: string }, x: fc.Arbitrary<T>) =>
    fc.tuple(valid, fc.nat(), x).map(([v, n, extra]) => {
      const paths = pathsOf(v);
      return f(v, paths[n % paths.length] as Path, extra);
    });
  return fc.oneof(
    { weight: 10, arbitrary: valid.map((value) => ({ body: { kind: "json" as const, value }, mutation: "valid" })) },
    {
      weight: 3,
      arbitrary: at(
        (v, path, w) => ({ body: { kind: "json", value: path.length === 0 ? w : edit(v, path, (p, k) => setOwn(p, k, w)) }, mutation: `wrong type at ${JSON.stringify(path)}` }),
        wrongValue,
      ),
    },
    {
      weight: 2,
      arbitrary: at((v, path) => {
        const value = edit(v, path, (p, k) => (Array.isArray(p) ? p.splice(Number(k), 1) : delete p[k]));
        return { body: { kind: "json", value }, mutation: `missing ${JSON.stringify(path)}` };
      }, fc.constant(null)),
    },
    {
      weight: 2,
      arbitrary: at(
        (v, path, [key, x]) => {
          const value = edit(v, [...path, key], (p, k) => {
            if (typeof p === "object" && p !== null && !Array.isArray(p)) setOwn(p, k, x);
          });
          return { body: { kind: "json", value }, mutation: `extra field ${JSON.stringify(key)} at ${JSON.stringify(path)}` };
        },
        fc.tuple(extraKey, anyJson),
      ),
    },
    {
      weight: 2,
      arbitrary: fc.tuple(valid, fc.nat(), fc.constantFrom("", "}", "{", ",", ":", '"', "\\", "\u0000", "'")).map(([v, n, junk]) => {
        const text = JSON.stringify(v) ?? "";
        const cut = n % (text.length + 1);
        return { body: { kind: "text" as const, text: text.slice(0, cut) + junk + (junk === "" ? "" : text.slice(cut)) }, mutation: `malformed JSON at ${cut}` };
      }),
    },
    { weight: 1, arbitrary: fc.constantFrom(...MALFORMED, ...NOT_OBJECTS).map((text) => ({ body: { kind: "text" as const, text }, mutation: "not a JSON object" })) },
    {
      weight: 1,
      arbitrary: at(
        (v, path, depth) => ({ body: { kind: "json", value: path.length === 0 ? deepMarker(depth) : edit(v, path, (p, k) => setOwn(p, k, deepMarker(depth))) }, mutation: `nested ${depth} deep at ${JSON.stringify(path)}` }),
        fc.constantFrom(2_000, 100_000),
      ),
    },
    {
      weight: 2,
      arbitrary: fc.tuple(valid, fc.nat(), fc.constantFrom(...EXTREMES)).map(([v, n, x]) => {
        const numbers = pathsOf(v).filter((p) => typeof p.reduce<unknown>((o, k) => (o as Record<string | number, unknown>)[k], v) === "number");
        const path = numbers[n % Math.max(1, numbers.length)];
        const value = path === undefined ? v : edit(v, path, (p, k) => setOwn(p, k, x));
        return { body: { kind: "json" as const, value }, mutation: `${Object.is(x, -0) ? "-0" : x} at ${JSON.stringify(path ?? null)}` };
      }),
    },
    {
      weight: 1,
      arbitrary: fc.tuple(valid, fc.nat(), fc.constantFrom(0xff, 0xc0, 0x80, 0xed)).map(([v, n, byte]) => {
        const text = JSON.stringify(v) ?? "";
        return { body: { kind: "bytes" as const, text, at: n % (text.length + 1), byte }, mutation: "invalid UTF-8" };
      }),
    },
    { weight: 1, arbitrary: fc.tuple(valid, fc.boolean()).map(([value, chunked]) => ({ body: { kind: "oversized" as const, value, chunked }, mutation: `oversized${chunked ? ", chunked" : ""}` })) },
    { weight: 1, arbitrary: fc.constant({ body: { kind: "none" as const }, mutation: "no body" }) },
  );
}

// ------------------------------------------------------------------ who asks

const tokenOf = (r: Role | "admin"): Value => ({ world: `token:${r}` });

const badCredential: fc.Arbitrary<Value> = fc.oneof(
  {
    weight: 2,
    arbitrary: fc.constantFrom<Value>(
      { world: "revokedToken" },
      { world: "foreignToken:operator" },
      { world: "foreignToken:viewer" },
      { world: "claimKey" },
      { literal: "rx_client_bogus" },
      { literal: "test-admin-token " },
      { literal: "x".repeat(10_000) },
    ),
  },
  { weight: 1, arbitrary: oddString.map((literal): Value => ({ literal })) },
);

/**
 * Credentials for a route: mostly a token of a role that may call it (`roles`, the document's
 * x-roles), so that most requests get past the door; then other roles' tokens, and every way a
 * token can be wrong.
 */
function credential(roles: readonly string[]): fc.Arbitrary<Value> {
  const all = [...ROLES, "admin" as const];
  const allowed = all.filter((r) => roles.includes(r));
  const others = all.filter((r) => !roles.includes(r));
  return fc.oneof(
    ...(allowed.length > 0 ? [{ weight: 14, arbitrary: fc.constantFrom(...allowed.map(tokenOf)) }] : []),
    ...(others.length > 0 ? [{ weight: 2, arbitrary: fc.constantFrom(...others.map(tokenOf)) }] : []),
    { weight: 2, arbitrary: badCredential },
  );
}

const authorization = (roles: readonly string[]) =>
  fc.oneof(
    { weight: 8, arbitrary: credential(roles).map((value) => ({ scheme: "Bearer ", value, suffix: "" })) },
    {
      weight: 1,
      arbitrary: fc.record({ scheme: fc.constantFrom("bearer ", "BEARER  ", "Basic ", "", "Bearer", "Token "), value: credential(roles), suffix: fc.constantFrom("", " ", " extra", "\t") }),
    },
  );

// ------------------------------------------------------------------ path and query

const unknownName = fc.constantFrom("no-such-engine", "NO_SUCH", "", "a".repeat(64), "%2e%2e", "..", "e\u0301", "😀", "\u0000", "a/b", "%zz");

function pathValue(name: string, roles: readonly string[]): fc.Arbitrary<Value> {
  const literal = (a: fc.Arbitrary<string>) => a.map((s): Value => ({ literal: s }));
  switch (name) {
    case "engine":
      return fc.oneof({ weight: 16, arbitrary: fc.constant<Value>({ world: "engine" }) }, { weight: 1, arbitrary: fc.constant<Value>({ world: "foreignEngine" }) }, { weight: 2, arbitrary: literal(unknownName) });
    case "name":
      // Not the other engine: the admin's routes could delete it, and its tokens stand for every run.
      return fc.oneof({ weight: 16, arbitrary: fc.constant<Value>({ world: "engine" }) }, { weight: 2, arbitrary: literal(unknownName) });
    case "token":
      return credential(roles);
    case "run_id":
      return fc.oneof({ weight: 4, arbitrary: fc.constant<Value>({ world: "runId" }) }, { weight: 2, arbitrary: literal(fc.constantFrom("run_0000", "run_zzzzzzzzzz", "run_", "RUN_1234", "run_" + "a".repeat(41))) }, { weight: 1, arbitrary: literal(oddString) });
    case "test_id":
      return fc.oneof({ weight: 4, arbitrary: fc.constant<Value>({ world: "testId" }) }, { weight: 2, arbitrary: literal(fc.constantFrom("itest_0000", "itest_", "itest_" + "a".repeat(41))) }, { weight: 1, arbitrary: literal(oddString) });
    case "episode_uuid":
      return fc.oneof({ weight: 6, arbitrary: literal(fc.constantFrom("ep-0", "ep-1", "ep-2", "ep-😀", "ep-3")) }, { weight: 1, arbitrary: literal(fc.oneof(oddString, fc.constant("e".repeat(513)))) });
    case "fence":
      // The world's claims have small fences; then what is not a fence (leading zeros, signs, exponents, past 15 digits).
      return fc.oneof({ weight: 6, arbitrary: literal(fc.integer({ min: 0, max: 8 }).map(String)) }, { weight: 1, arbitrary: literal(fc.oneof(fc.constantFrom("01", "-1", "1e0", "1.0", "9".repeat(16), "0x1"), oddString)) });
    case "id":
      return fc.oneof(
        { weight: 2, arbitrary: fc.constant<Value>({ world: "revokedTokenId" }) },
        { weight: 2, arbitrary: fc.constantFrom(...ROLES.map((r): Value => ({ world: `tokenId:${r}` }))) },
        { weight: 2, arbitrary: literal(fc.oneof(fc.constantFrom("tok_0000", ""), oddString)) },
      );
    default:
      return literal(oddString);
  }
}

/** Query values that would hold a request open for real seconds are left out: `wait` is a long poll. */
const QUERY_OVERRIDES: Record<string, fc.Arbitrary<string>> = {
  wait: fc.constantFrom("0", "0.001", "", "abc", "-1", "26", "NaN", "1e999", "0x0", "Infinity"),
};

const wrongQuery = fc.oneof(fc.constantFrom("", "abc", "-1", "0", "1.5", "1e999", "NaN", "null", "[]", "9".repeat(400)), oddString);

function queryArb(doc: Doc, params: Parameter[]): fc.Arbitrary<[string, string][]> {
  const entries = params.map((p) =>
    fc.oneof(
      { weight: 3, arbitrary: fc.constant<[string, string][]>([]) },
      { weight: 4, arbitrary: (QUERY_OVERRIDES[p.name] ?? valueOf(doc, p.schema).map((v) => (typeof v === "string" ? v : JSON.stringify(v)))).map((v): [string, string][] => [[p.name, v]]) },
      { weight: 2, arbitrary: (QUERY_OVERRIDES[p.name] ?? wrongQuery).map((v): [string, string][] => [[p.name, v]]) },
      { weight: 1, arbitrary: fc.tuple(wrongQuery, wrongQuery).map(([a, b]): [string, string][] => [[p.name, a], [p.name, b]]) },
    ),
  );
  const extra = fc.oneof({ weight: 5, arbitrary: fc.constant<[string, string][]>([]) }, { weight: 1, arbitrary: fc.tuple(extraKey, wrongQuery).map((kv): [string, string][] => [kv]) });
  return fc.tuple(fc.tuple(...entries), extra).map(([e, x]) => [...e.flat(), ...x]);
}

// ------------------------------------------------------------------ MCP

const MCP_PATH = /\/mcp$/;

/** The document gives MCP's body as "a JSON-RPC message": its methods and tools are known here. */
function mcpBody(doc: Doc): fc.Arbitrary<unknown> {
  const id = fc.oneof(fc.integer(), fc.constantFrom("a", ""), oddString);
  const call = fc.oneof(
    ...TOOLS.map((t) => valueOf(doc, toJsonSchema(t.input as z.ZodType, "input")).map((args) => ({ name: t.name, arguments: args }))),
    fc.record({ name: fc.oneof(fc.constant("rl_nope"), oddString), arguments: anyJson }),
  );
  const message = fc.oneof(
    fc.record({ jsonrpc: fc.constant("2.0"), id, method: fc.constant("initialize"), params: fc.record({ protocolVersion: fc.oneof(fc.constantFrom(...PROTOCOL_VERSIONS), oddString) }) }),
    fc.record({ jsonrpc: fc.constant("2.0"), id, method: fc.constantFrom("ping", "tools/list", "resources/list", "") }),
    fc.record({ jsonrpc: fc.constant("2.0"), id, method: fc.constant("tools/call"), params: call }),
    fc.record({ jsonrpc: fc.constant("2.0"), method: fc.constant("notifications/initialized") }),
    fc.record({ jsonrpc: fc.constant("2.0"), id, result: anyJson }),
    anyJson,
  );
  return fc.oneof({ weight: 4, arbitrary: message }, { weight: 1, arbitrary: fc.array(message, { maxLength: 22 }) });
}

const mcpHeaders = fc.oneof(
  { weight: 4, arbitrary: fc.constant<Record<string, string>>({}) },
  { weight: 1, arbitrary: fc.constantFrom(...PROTOCOL_VERSIONS, "1999-01-01", "").map((v) => ({ "mcp-protocol-version": v })) },
);

// ------------------------------------------------------------------ targets

const contentType = fc.oneof(
  { weight: 9, arbitrary: fc.constant<Record<string, string>>({ "content-type": "application/json" }) },
  { weight: 1, arbitrary: fc.constantFrom<Record<string, string>>({}, { "content-type": "text/plain" }) },
);

const canHaveBody = (m: Method): boolean => m !== "get" && m !== "head";

/**
 * A value that stays one path segment: the URL parser neither splits it (`/`, `?`, `#`) nor
 * drops it (`.`, `..` and their encodings), so the request still reaches the route it names.
 */
function oneSegment(v: Value): boolean {
  if (!("literal" in v)) return true;
  const s = v.literal.replace(/[\t\n\r]/g, "");
  return s !== "" && !/[/?#\\]/.test(s) && keepsItsPlace(v);
}

/**
 * A value without dot segments (`..`, `%2e`, between slashes or backslashes): the URL parser
 * resolves those before the request leaves, so `/e/%2e%2e/health` is sent as `/health`, another
 * route, and tests nothing but the parser.
 */
function keepsItsPlace(v: Value): boolean {
  return !("literal" in v) || !/(^|[/\\])(\.|%2e){1,2}([/\\]|$)/i.test(v.literal.replace(/[\t\n\r]/g, ""));
}

function requestsFor(
  doc: Doc,
  key: string,
  path: string,
  method: Method,
  op: Operation | undefined,
  pathParams: string[],
  opts: { body?: fc.Arbitrary<unknown>; headers?: fc.Arbitrary<Record<string, string>>; segments?: boolean } = {},
): fc.Arbitrary<FuzzRequest> {
  const params = op ? parametersOf(doc, op) : pathParams.map((name): Parameter => ({ name, in: "path", schema: { type: "string" } }));
  // Every role for a path without its method: what matters there is that nothing answers it.
  const roles = op?.["x-roles"] ?? [...ROLES, "admin"];
  const paramsArb = fc.record(Object.fromEntries(params.filter((p) => p.in === "path").map((p) => [p.name, pathValue(p.name, roles).filter(opts.segments ? oneSegment : keepsItsPlace)])));
  const query = queryArb(doc, params.filter((p) => p.in === "query"));
  const schema = op ? bodySchemaOf(op) : undefined;
  const seeds = seedsFor(path);
  const fromSchema = opts.body ?? (schema ? valueOf(doc, schema) : fc.constant({}));
  const valid = seeds.length > 0 ? fc.oneof(fromSchema, fc.constantFrom(...seeds)) : fromSchema;
  const body = canHaveBody(method) ? broken(valid) : fc.constant({ body: { kind: "none" as const }, mutation: "no body" });
  // The token-in-path form carries its credential in the path; a header there is the odd case.
  const tokenInPath = path.includes("{token}");
  const auth = tokenInPath
    ? fc.oneof({ weight: 6, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: authorization(roles) })
    : fc.option(authorization(roles), { nil: null, freq: 12 });
  return fc
    .record({ params: paramsArb, query, auth, body, contentType, headers: opts.headers ?? fc.constant({}) })
    .map((r) => ({
      target: key,
      path,
      method: method.toUpperCase() as Uppercase<Method>,
      documented: op !== undefined,
      params: r.params as Record<string, Value>,
      query: r.query,
      authorization: r.auth,
      headers: { ...(r.body.body.kind === "none" ? {} : r.contentType), ...r.headers },
      body: r.body.body,
      mutation: r.body.mutation,
    }));
}

const paramNames = (path: string): string[] => [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1] as string);

/**
 * The relay's routes as the document lists them (at the origin and under an engine in both
 * forms). Their requests are made here, not from the document: their key is a claim's, not an
 * engine token, and their errors are OpenAI's.
 */
const relayRoutes = (doc: Doc): { path: string; method: Method }[] =>
  Object.entries(doc.paths)
    .filter(([path]) => isRelayPath(path))
    .flatMap(([path, item]) => Object.keys(item).map((m) => ({ path, method: m as Method })));

const chatBody = fc.record(
  {
    model: fc.oneof(fc.constantFrom("m-1", ""), oddString),
    messages: fc.array(fc.record({ role: fc.constantFrom("user", "system", "assistant"), content: fc.oneof(fc.constantFrom(...DICTIONARY), oddString) }), { maxLength: 3 }),
    prompt: fc.oneof(fc.constantFrom(...DICTIONARY), oddString),
    max_tokens: fc.integer({ min: -1, max: 4096 }),
  },
  { requiredKeys: ["model"] },
);

const relayKey = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom<Value>({ world: "claimKey" }, { world: "staleClaimKey" }) },
  { weight: 2, arbitrary: credential([...ROLES, "admin"]) },
  { weight: 1, arbitrary: fc.constantFrom<Value>({ literal: "sk-rx-forged.payload.sig" }, { literal: "sk-ajet-e30=" }) },
);

/** Every target the fuzzer aims at, each with its own request generator. */
/** The relay's routes as the document lists them: their requests are RELAY_ROUTES' (a claim's key, OpenAI's errors). */
export const isRelayPath = (path: string): boolean => /(^|\})\/v1\//.test(path);

export function targets(doc: Doc): Target[] {
  const out: Target[] = [];
  const documented = Object.entries(doc.paths).filter(([path]) => !isRelayPath(path));
  for (const [path, item] of documented) {
    for (const [m, op] of Object.entries(item)) {
      const method = m as Method;
      const mcp = MCP_PATH.test(path);
      const key = `${method} ${path}`;
      out.push({ key, path, method, op, shape: "exchange", arbitrary: requestsFor(doc, key, path, method, op, [], mcp ? { body: mcpBody(doc), headers: mcpHeaders } : {}) });
    }
    const wrong = METHODS.filter((m) => !(m in item) && !(m === "head" && "get" in item));
    const key = `wrong method ${path}`;
    out.push({ key, path, method: "put", op: undefined, shape: "exchange", arbitrary: fc.constantFrom(...wrong).chain((m) => requestsFor(doc, key, path, m, undefined, paramNames(path))) });
  }
  for (const r of relayRoutes(doc)) {
    const key = `relay ${r.method} ${r.path}`;
    // Kept to the relay's own paths: a value that split the path would make it another route, with the exchange's errors.
    const requests = requestsFor(doc, key, r.path, r.method, undefined, paramNames(r.path), { body: chatBody, segments: true });
    const withKey = fc.tuple(requests, fc.option(fc.record({ scheme: fc.constantFrom("Bearer ", "Bearer ", "bearer ", "Basic "), value: relayKey, suffix: fc.constant("") }), { nil: null, freq: 8 }));
    out.push({ key, path: r.path, method: r.method, op: undefined, shape: "openai", arbitrary: withKey.map(([req, authorization]) => ({ ...req, authorization })) });
  }
  // HEAD of every GET route: answered as the GET without its body.
  for (const [path, item] of documented) {
    const op = item["get"];
    if (op === undefined) continue;
    const key = `head ${path}`;
    out.push({ key, path, method: "head", op, shape: "exchange", arbitrary: requestsFor(doc, key, path, "head", op, []) });
  }
  return out;
}
