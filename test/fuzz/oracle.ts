/**
 * What every answer must be: never a 5xx (the relay's gateway failures and Atropos's own aside),
 * JSON whenever it has a body (JSON lines or plain text where the document says so), and what
 * the document promises for its route and status. Says whether the answer
 * was a refusal, after which the engine must look exactly as it did before.
 */
import { z } from "zod";
import { describeIssues } from "../../src/http/errors";
import { ErrorResponse } from "../../src/protocol/admin";
import { OpenAIError } from "../../src/protocol/relay";
import type { Target } from "./arbitraries";
import { JSON_LINES, promiseOf, type Doc, type Operation } from "./document";
import type { Answer, View } from "./world";

/**
 * The relay's own 5xx: no gateway registered or the engine not rolling (503), a gateway that
 * cannot be reached (502) or does not answer in time (504). They are its documented answers to
 * a well-formed call of a live claim, not failures of the exchange.
 */
const RELAY_GATEWAY_CODES = new Set(["no_gateway", "engine_not_rolling", "gateway_unreachable", "upstream_timeout"]);

/** The body of a refusal that the document does not describe (a path without that method). */
const AnyExchangeError = ErrorResponse.loose();

class Broken extends Error {
  override name = "Broken";
}

function parseJson(answer: Answer): unknown {
  if (!(answer.contentType ?? "").startsWith("application/json")) throw new Broken(`a ${answer.status} answer that is not JSON (content-type ${answer.contentType}): ${answer.text.slice(0, 300)}`);
  try {
    return JSON.parse(answer.text) as unknown;
  } catch {
    throw new Broken(`a ${answer.status} answer whose body does not parse as JSON: ${answer.text.slice(0, 300)}`);
  }
}

function conform(schema: z.ZodType, json: unknown, what: string): void {
  const r = schema.safeParse(json);
  if (!r.success) throw new Broken(`${what}: ${describeIssues(r.error)}; got ${JSON.stringify(json).slice(0, 500)}`);
}

/**
 * JSON lines: the documented media type, every line (each ended by a newline, none empty) JSON
 * that conforms to the item schema.
 */
function conformLines(item: z.ZodType, status: number, contentType: string | null, text: string, what: string): void {
  if (!(contentType ?? "").startsWith(JSON_LINES)) throw new Broken(`${what}: a ${status} answer that is not JSON lines (content-type ${contentType}): ${text.slice(0, 300)}`);
  if (text !== "" && !text.endsWith("\n")) throw new Broken(`${what}: JSON lines whose last line is cut short: ...${text.slice(-300)}`);
  for (const [i, line] of text.split("\n").slice(0, -1).entries()) {
    let json: unknown;
    try {
      json = JSON.parse(line) as unknown;
    } catch {
      throw new Broken(`${what}: line ${i} does not parse as JSON: ${line.slice(0, 300)}`);
    }
    conform(item, json, `${what}: line ${i}`);
  }
}

/** An MCP answer (one message or a batch) in which every message is an error or a refused tool call. */
function mcpRefused(json: unknown): boolean {
  const messages = Array.isArray(json) ? json : [json];
  return messages.every((m: unknown) => {
    if (typeof m !== "object" || m === null) return false;
    if ("error" in m) return true;
    const result = (m as { result?: { isError?: unknown } }).result;
    return result?.isError === true;
  });
}

/** The `error` code of an exchange error body, or "" for any other answer. */
function errorCode(answer: Answer): string {
  try {
    const json = JSON.parse(answer.text) as { error?: unknown };
    return typeof json.error === "string" ? json.error : "";
  } catch {
    return "";
  }
}

/** Checks an answer; throws Broken if it breaks a rule. True when it refused the request. */
export function judge(doc: Doc, target: Target, method: string, answer: Answer): boolean {
  const { status } = answer;
  if (target.shape === "openai") {
    if (status >= 200 && status < 300) {
      if ((answer.contentType ?? "").startsWith("text/event-stream")) return false;
      parseJson(answer);
      return false;
    }
    const json = parseJson(answer);
    conform(OpenAIError, json, `the relay's ${status} is not an OpenAI error`);
    if (status >= 500) {
      const code = (json as z.infer<typeof OpenAIError>).error.code ?? "";
      if (!RELAY_GATEWAY_CODES.has(code)) throw new Broken(`the relay answered ${status} ${code}`);
      return status === 503;
    }
    return status >= 400;
  }
  const op = target.op;
  const promised = op === undefined ? undefined : promiseOf(doc, op, status);
  // Documented 503s too (the ledger's ledger_unavailable, a store that failed): workerd's local D1
  // and R2 do not fail, so one here is a bug that an outage would only hide. Only Atropos's own
  // 500 (plain text, where its handler raises) and a 5xx the document marks a refusal by design
  // (x-refusal-codes: a full Atropos queue's queue_full, a full store's storage_full) are answers.
  const raised = status === 500 && promised?.kind === "text";
  const refusedByDesign = promised?.refusalCodes?.includes(errorCode(answer)) === true;
  if (status >= 500 && !raised && !refusedByDesign) throw new Broken(`a ${status}: ${answer.text.slice(0, 500)}`);
  if (status < 200 || (status >= 300 && status < 400)) throw new Broken(`an unexpected ${status}`);
  if (method === "HEAD") {
    if (answer.text !== "") throw new Broken(`a HEAD answered with a body: ${answer.text.slice(0, 200)}`);
    // A GET marked x-changes-state is not answered to HEAD (a safe method): refused (405, or a
    // 4xx of the request's own: a token that is none), changing nothing.
    if (op?.["x-changes-state"] === true) {
      if (status < 400) throw new Broken(`a HEAD of a GET that changes state answered ${status}`);
      return true;
    }
    if (op === undefined && status < 400) throw new Broken(`a HEAD of a path without a GET answered ${status}`);
    if (op && promised === undefined) throw new Broken(`HEAD answered ${status}, which the document does not list for the GET`);
    // Atropos's 500 comes after its handler may have changed things (a batch after /reset_data marks the run started).
    return status >= 400 && !raised;
  }
  if (op === undefined) {
    // A method the path does not have: refused like any unknown route.
    if (status < 400) throw new Broken(`a method the document does not list for this path answered ${status}: ${answer.text.slice(0, 300)}`);
    conform(AnyExchangeError, parseJson(answer), `the ${status} is not {error, detail}`);
    return true;
  }
  if (promised === undefined) throw new Broken(`${status}, which the document does not list for ${op.operationId}: ${answer.text.slice(0, 300)}`);
  if (promised.kind === "empty") {
    if (answer.text !== "") throw new Broken(`a ${status} documented without a body answered ${answer.text.slice(0, 200)}`);
    return status >= 400;
  }
  const what = `the ${status} answer does not match the document's schema for ${op.operationId}`;
  if (promised.kind === "text") {
    if (!(answer.contentType ?? "").startsWith("text/plain")) throw new Broken(`${what}: a ${status} answer that is not plain text (content-type ${answer.contentType})`);
    conform(promised.schema, answer.text, what);
    return status >= 400 && !raised;
  }
  if (promised.kind === "lines") {
    conformLines(promised.item, status, answer.contentType, answer.text, what);
    return status >= 400;
  }
  const json = parseJson(answer);
  conform(promised.schema, json, what);
  return status >= 400 || (target.path.endsWith("/mcp") && mcpRefused(json));
}

/** A read of a snapshot: what the views show must be a documented 200, as any answer (JSON parsed, JSON lines as text). */
export function judgeView(doc: Doc, op: Operation, view: View): void {
  const promised = promiseOf(doc, op, 200);
  if (view.status !== 200 || promised === undefined || promised.kind === "empty") throw new Broken(`the view ${op.operationId} answered ${view.status}: ${JSON.stringify(view.body).slice(0, 300)}`);
  const what = `the view ${op.operationId} does not match the document`;
  if (promised.kind === "lines") conformLines(promised.item, view.status, view.contentType, String(view.body), what);
  else conform(promised.schema, view.body, what);
}
