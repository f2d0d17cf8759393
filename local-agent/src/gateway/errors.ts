/**
 * OpenAI-style error answers from the gateway. The Worker passes a gateway's non-2xx answer
 * through to the client when it is an OpenAI error object, so the client's OpenAI library
 * classifies it (and retries 5xx) as it would an error from OpenAI itself.
 */
import type { ServerResponse } from "node:http";
import { openaiErrorBody } from "../../../src/relay/openai-errors";
import { isRecord } from "../../../src/protocol/record";

/** `headers`: the upstream's retryHeaders, for an error that passes on the upstream's own. */
export function sendError(res: ServerResponse, status: number, message: string, code: string | null, headers?: Record<string, string>): void {
  if (res.headersSent) {
    // A stream is already open: the status line is gone, so the error becomes its last event.
    if (!res.writableEnded) res.end(`data: ${JSON.stringify(openaiErrorBody(status, message, code))}\n\n`);
    return;
  }
  sendJson(res, status, JSON.stringify(openaiErrorBody(status, message, code)), headers);
}

/** What a failed call's answer is recorded with (the ledger's CallTap), when the call is recorded. */
export type FailureTap = { failed(status: number, code: string | null, message: string): void };

/** sendError, noting the failure on the call's tap first. */
export function sendFailure(res: ServerResponse, tap: FailureTap | null, status: number, message: string, code: string | null, headers?: Record<string, string>): void {
  tap?.failed(status, code, message);
  sendError(res, status, message, code, headers);
}

export function sendJson(res: ServerResponse, status: number, text: string, headers?: Record<string, string>): void {
  res.writeHead(status, { ...headers, "content-type": "application/json", "content-length": Buffer.byteLength(text) }).end(text);
}

/** An object with an `error` object carrying a message: what OpenAI-compatible servers send. */
export function isOpenAIErrorText(text: string): boolean {
  try {
    const v: unknown = JSON.parse(text);
    if (typeof v !== "object" || v === null) return false;
    const err: unknown = (v as { error?: unknown }).error;
    return typeof err === "object" && err !== null && typeof (err as { message?: unknown }).message === "string";
  } catch {
    return false;
  }
}

/**
 * What kind of failure `e` was, for an answer to a caller: its code (ECONNREFUSED,
 * UND_ERR_SOCKET, EINVAL), else its name, never its message. A socket error's message names the
 * peer ("connect ECONNREFUSED 10.0.0.5:8000"), and the trainer's base URLs and ZeroMQ addresses
 * are never shown to clients (docs/security.md); the agent's log gets the whole message.
 */
export function failureKind(e: unknown): string {
  let err: unknown = e;
  // Bounded: a cause chain may loop.
  for (let depth = 0; depth < 4 && typeof err === "object" && err !== null; depth++) {
    const code = (err as { code?: unknown }).code;
    if (typeof code === "string" && code !== "") return code;
    err = (err as { cause?: unknown }).cause;
  }
  return e instanceof Error ? e.name : "unknown error";
}

/** The spellings of an address that text may carry: itself, and a URL's origin, host:port and host. */
export function addressForms(address: string): string[] {
  // A runner's ipc:// socket is named by its path, which a runner's error would name bare.
  if (address.startsWith("ipc://")) return [address, address.slice("ipc://".length)];
  if (!URL.canParse(address)) return [address];
  const u = new URL(address);
  // An IPv6 host shows up unbracketed in errors.
  return [address, u.origin, u.host, u.hostname, u.hostname.replace(/^\[(.*)\]$/, "$1")];
}

/**
 * Whether hiding `s` can only hide an address: a bare word ("model", a docker service's name,
 * "null", the origin of tcp://) would mangle the text around it and tells a client little;
 * a quote or backslash could cut through an upstream's JSON error, which goes on as JSON.
 */
const isAddressLike = (s: string): boolean => /[.:/]/.test(s) && !/["\\]/.test(s);

/**
 * `text` from the trainer's side (an upstream's error body, a runner's answer) with each of
 * `addresses` replaced, longest first so that a host inside a URL does not leave the URL's
 * rest: an upstream that names itself in an error must not tell clients where it is.
 */
export function hideAddresses(text: string, addresses: readonly string[]): string {
  let out = text;
  for (const a of [...new Set(addresses)].filter(isAddressLike).sort((x, y) => y.length - x.length)) out = out.replaceAll(a, "[hidden]");
  return out;
}

/** The JSON spelling of `s` inside a JSON string, quotes left off. */
const jsonEscaped = (s: string): string => JSON.stringify(s).slice(1, -1);

/**
 * The text whose absence from an answer means that hideAddresses(`addresses`) and
 * hideSecrets(`secrets`) would leave it as it is, in as few strings as that takes (a form that
 * holds another, a URL its host, is found through the other): for a cheap look at text that
 * seldom holds any (a stream's events) before anything is rewritten.
 */
export function hiddenTextProbe(addresses: readonly string[], secrets: readonly string[]): string[] {
  const forms = [...new Set([...addresses.filter(isAddressLike), ...secrets.flatMap((s) => [s, jsonEscaped(s)])].filter((s) => s !== ""))];
  return forms.filter((s) => !forms.some((t) => t !== s && s.includes(t)));
}

/** An answer that is an error where a completion was expected: `{"error": ...}`, or vLLM's flat `{"object": "error", ...}`. */
export const isErrorAnswer = (v: Record<string, unknown>): boolean => v["object"] === "error" || (v["error"] !== undefined && v["error"] !== null);

/**
 * The fields of the error an answer or an event is (isErrorAnswer): vLLM's flat form itself,
 * OpenAI's nested object, or a proxy's `{"error": "text"}` as its message; null for no error.
 */
export function errorFields(v: Record<string, unknown>): Record<string, unknown> | null {
  if (!isErrorAnswer(v)) return null;
  const nested = v["error"];
  return v["object"] === "error" ? v : isRecord(nested) ? nested : { message: typeof nested === "string" ? nested : JSON.stringify(nested) };
}

/**
 * The credentials the gateway sends on the trainer's behalf, in the spellings an answer may
 * echo them in: the trainer's key (which is also the whole of the Authorization value but for
 * "Bearer "), and a user:password in the upstream's URL with its Basic form. Clients hold only
 * their per-claim key; an upstream that repeats what it was sent ("Incorrect API key provided:
 * sk-...") must not hand them the trainer's.
 */
export function credentialForms(trainerKey: string, urls: readonly string[] = []): string[] {
  // URL-encoded too: a proxy may name the key in a URL (`?api_key=sk-...%2B...`), and a base64 key has / + =.
  const forms = [trainerKey, encodeURIComponent(trainerKey)];
  for (const url of urls) {
    const c = credentialsIn(url);
    if (c === null) continue;
    forms.push(c.pair, c.password, decoded(c.password), Buffer.from(c.pair).toString("base64"));
  }
  return forms.filter((f) => f !== "");
}

/** The URL without a user:password it may carry (nor its query, where a proxy may take a key). */
export function withoutCredentials(url: string): string {
  const u = new URL(url);
  return u.origin + u.pathname;
}

/** The `user:password` a URL carries, percent-decoded as Basic authorization sends it; null for none. */
export const urlCredentials = (url: string): string | null => credentialsIn(url)?.pair ?? null;

/** A URL's credentials: the decoded pair, and the password as the URL writes it; null for none. */
function credentialsIn(url: string): { pair: string; password: string } | null {
  // Most upstreams carry none: no URL parsed on their calls.
  if (!url.includes("@") || !URL.canParse(url)) return null;
  const u = new URL(url);
  if (u.username === "" && u.password === "") return null;
  return { pair: `${decoded(u.username)}:${decoded(u.password)}`, password: u.password };
}

/** A URL part percent-decoded; as written when it is no such spelling (a password `50%off`, which URL keeps as it is). */
function decoded(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

/**
 * `text` (an answer from the trainer's side) with each secret replaced by "[hidden]", whatever
 * the secret holds. JSON stays valid JSON: a key with a quote or backslash appears escaped in
 * it, so JSON text is rewritten string by string; only text that carries a secret is touched.
 */
export function hideSecrets(text: string, secrets: readonly string[]): string {
  const all = [...new Set(secrets.filter((s) => s !== ""))].sort((x, y) => y.length - x.length);
  const escaped = all.map(jsonEscaped);
  if (!all.some((s, i) => text.includes(s) || text.includes(escaped[i]!))) return text;
  const scrub = (s: string): string => all.reduce((out, secret) => out.replaceAll(secret, "[hidden]"), s);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return all.reduce((out, secret, i) => out.replaceAll(secret, "[hidden]").replaceAll(escaped[i]!, "[hidden]"), text);
  }
  const walk = (v: unknown): unknown => {
    if (typeof v === "string") return scrub(v);
    if (Array.isArray(v)) return v.map(walk);
    if (typeof v === "object" && v !== null) return Object.fromEntries(Object.entries(v).map(([k, x]) => [scrub(k), walk(x)]));
    return v;
  };
  const out = JSON.stringify(walk(json));
  // A secret made of JSON's own syntax ("{", a digit) survives outside strings; then nothing of the text goes on.
  return all.some((s) => out.includes(s)) ? JSON.stringify({ error: { message: "[hidden: the answer repeated the trainer's credentials]", type: "upstream_error", param: null, code: null } }) : out;
}
