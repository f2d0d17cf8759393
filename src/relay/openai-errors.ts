import { z } from "zod";
import type { OpenAIError } from "../protocol/relay";

/** OpenAI's error types by status, so OpenAI clients classify (and retry) our errors as theirs. */
export function errorType(status: number): string {
  if (status === 401) return "authentication_error";
  if (status === 403) return "permission_error";
  if (status === 404) return "not_found_error";
  if (status === 429) return "rate_limit_error";
  if (status >= 500) return "api_error";
  return "invalid_request_error";
}

export function openaiErrorBody(status: number, message: string, code: string | null = null): OpenAIError {
  return { error: { message, type: errorType(status), param: null, code } };
}

export function openaiErrorResponse(status: number, message: string, code: string | null = null): Response {
  return Response.json(openaiErrorBody(status, message, code), { status });
}

/**
 * Whether a status from behind the exchange is a refusal there: the gateway refusing the
 * exchange's signature (a host clock off by minutes) or the upstream the trainer's key. The
 * client's own key was good (the Worker checked it), and a 401 would tell an OpenAI client it
 * was not, which it does not retry: it gets refusedBehindBody, a 502, the deployment's fault.
 */
export const refusedBehind = (status: number): boolean => status === 401 || status === 403;

export function refusedBehindBody(status: number, text: string): OpenAIError {
  const err = openaiErrorIn(text);
  const said = err?.error.message ?? text.slice(0, 300);
  return err?.error.code === "invalid_signature"
    ? openaiErrorBody(502, `The inference gateway refused the exchange's signature (${status}): ${said}`, "gateway_refused")
    : openaiErrorBody(502, `The inference upstream refused the trainer's credentials (${status}): ${said}`, "upstream_refused");
}

/** A number of seconds or milliseconds, as OpenAI's SDKs parse one. */
const NUMBER = /^\d{1,10}(?:\.\d{1,6})?$/;
const HTTP_DATE = /^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$/;

/**
 * The headers of an upstream's error answer that say when to try again, as OpenAI's SDKs read
 * them (a 429's or 503's): passed on by the gateway and the Worker, so the client waits as long
 * as it was told to. Only well-formed values: seconds or an HTTP date (IMF-fixdate, what RFC 9110
 * has senders write) for retry-after, milliseconds for retry-after-ms; nothing else of the
 * upstream's headers reaches a client.
 */
export function retryHeaders(get: (name: string) => string | null | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  const after = get("retry-after")?.trim();
  if (after !== undefined && (NUMBER.test(after) || (HTTP_DATE.test(after) && !Number.isNaN(Date.parse(after))))) out["retry-after"] = after;
  const ms = get("retry-after-ms")?.trim();
  if (ms !== undefined && NUMBER.test(ms)) out["retry-after-ms"] = ms;
  return out;
}

/**
 * The client's answer to a gateway's error answer (its status not 2xx, `text` its body): an
 * OpenAI error keeps its status, a refusal behind the exchange is a 502, anything else is
 * worded as what it was; the upstream's retryHeaders go with it.
 */
export function gatewayErrorResponse(res: Response, text: string): Response {
  const headers = retryHeaders((name) => res.headers.get(name));
  if (refusedBehind(res.status)) return Response.json(refusedBehindBody(res.status, text), { status: 502, headers });
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return Response.json(openaiErrorBody(502, `The inference upstream answered something that is not JSON: ${text.slice(0, 200)}`, "upstream_garbage"), { status: 502, headers });
  }
  const err = readOpenAIError(json);
  const status = res.status >= 400 && res.status < 600 ? res.status : 502;
  return Response.json(err ?? openaiErrorBody(status, `The inference upstream answered ${res.status}: ${text.slice(0, 300)}`, "upstream_error"), { status, headers });
}

/** The OpenAI error `text` holds, or null when it holds none. */
export function openaiErrorIn(text: string): OpenAIError | null {
  try {
    return readOpenAIError(JSON.parse(text));
  } catch {
    return null;
  }
}

/**
 * An OpenAI error as model servers write it: vLLM gives `code` as the HTTP status, a number, and
 * some leave `param` or `code` out. OpenAI's clients type both as strings or null.
 */
const UpstreamOpenAIError = z.object({
  error: z.object({
    message: z.string(),
    type: z.string(),
    param: z.union([z.string(), z.number()]).nullish(),
    code: z.union([z.string(), z.number()]).nullish(),
  }),
});

/** `json` as an OpenAI error, its number `param` or `code` as text; null when it is none. */
function readOpenAIError(json: unknown): OpenAIError | null {
  const read = UpstreamOpenAIError.safeParse(json);
  if (!read.success) return null;
  const e = read.data.error;
  return { error: { message: e.message, type: e.type, param: openAIFieldText(e.param), code: openAIFieldText(e.code) } };
}

/**
 * An error's `param` or `code` as OpenAI's clients type them, a string or null: a model server's
 * number (vLLM's code is the HTTP status) as its text. For the Worker and the agent's gateway alike.
 */
export function openAIFieldText(v: unknown): string | null {
  return v === null || v === undefined ? null : typeof v === "string" ? v : JSON.stringify(v);
}
