/**
 * Trainers that serve plain OpenAI-compatible HTTP (vLLM, SGLang, a slime LLM proxy): the call
 * is forwarded with the trainer's key and the episode's id, and the answer comes back as the
 * upstream gave it (a stream stays a stream), or as an OpenAI error the client can act on.
 */
import type { ServerResponse } from "node:http";
import { request, type Dispatcher } from "undici";
import type { RelayEnvelope } from "../../../src/protocol/relay";
import { describeError, type Logger } from "../log";
import type { CallTap } from "../ledger/call-tap";
import { addressForms, credentialForms, errorFields, failureKind, hiddenTextProbe, hideAddresses, hideSecrets, isOpenAIErrorText, sendFailure, sendJson, urlCredentials, withoutCredentials } from "./errors";
import { SseRedaction } from "./sse-redaction";
import { StreamEnd } from "./stream-end";
import type { UpstreamErrors } from "./upstream-errors";
import { isRecord } from "../../../src/protocol/record";
import { headOf } from "../../../src/protocol/limits";
import { openAIFieldText, retryHeaders } from "../../../src/relay/openai-errors";

export type UpstreamOptions = {
  /** Configured base URL (…/v1); null: the episode's registered openai_base_url. */
  upstream: string | null;
  /** Put the episode id in the path, /v1/<episode>/chat/completions. */
  sessionPath: boolean;
};

export const EPISODE_HEADER = "x-episode-uuid";

/** Visible ASCII, spaces inside only: what a header holds as it is (undici refuses the rest, and trims the ends). */
const HEADER_SAFE = /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/;

/** The episode as its header names it: as it is, or percent-encoded when a header cannot hold it (任务-7). */
const episodeHeader = (episode: string): string => (HEADER_SAFE.test(episode) ? episode : encodeURIComponent(episode));

export function upstreamUrl(env: RelayEnvelope, o: UpstreamOptions): string | null {
  const base = (o.upstream ?? env.trainer_base_url).replace(/\/+$/, "");
  if (!/^https?:\/\//.test(base)) return null;
  const rest = env.endpoint.slice("/v1".length); // "/chat/completions"
  const session = o.sessionPath && env.endpoint !== "/v1/models" ? `/${encodeURIComponent(env.episode_uuid)}` : "";
  // The exchange takes any string as an episode's openai_base_url ("http://[oops" too).
  return URL.canParse(base + session + rest) ? base + session + rest : null;
}

/**
 * Why a call ended early: `signal` aborts at the deadline (then `deadline.aborted`: a 504) or
 * when the client hangs up (nothing to answer). One signal per call rather than one per cause
 * joined by AbortSignal.any, which cost the gateway more than its signature check.
 */
export type CallSignals = { signal: AbortSignal; deadline: { readonly aborted: boolean }; deadlineSeconds: number };

/**
 * `requestText`: the request's JSON as the client sent it (envelopeRequestText), else null to
 * serialize `env.request`. `tap`: the ledger's watch on a call it records (which may rewrite the
 * request and the answer, see ledger/call-tap.ts); null for a call it does not.
 */
export async function forwardHttp(
  env: RelayEnvelope,
  requestText: string | null,
  o: UpstreamOptions & { logger: Logger },
  errors: UpstreamErrors,
  s: CallSignals,
  res: ServerResponse,
  tap: CallTap | null = null,
): Promise<void> {
  const url = upstreamUrl(env, o);
  const fail = (status: number, message: string, code: string, headers?: Record<string, string>): void => sendFailure(res, tap, status, message, code, headers);
  if (url === null) {
    fail( 502, "no inference upstream: the episode registered no http(s) openai_base_url that is a URL, and the agent has no inferenceUpstream", "no_upstream");
    return;
  }
  const headers: Record<string, string> = { [EPISODE_HEADER]: episodeHeader(env.episode_uuid), accept: "application/json, text/event-stream" };
  // undici drops a URL's user:password; a Basic-auth proxy in front of the model server needs it
  // sent. The trainer's key, when it registered one, is the authorization the upstream expects.
  const basic = env.trainer_api_key === "" ? urlCredentials(url) : null;
  if (env.trainer_api_key !== "") headers["authorization"] = `Bearer ${env.trainer_api_key}`;
  else if (basic !== null) headers["authorization"] = `Basic ${Buffer.from(basic).toString("base64")}`;
  if (env.request !== null) headers["content-type"] = "application/json";
  const timedOut = (): void => fail(504, `the inference upstream did not answer within ${s.deadlineSeconds} s`, "upstream_timeout");
  // Leaving the loop that reads it (a return inside for await, or boundedText) destroys the upstream's body, and with it its request.
  const answerTooLarge = (what: string): void => {
    o.logger.warn(`gateway: episode ${env.episode_uuid}: the inference upstream ${withoutCredentials(url)} sent ${what} past ${MAX_ANSWER_BYTES / MIB} MiB: cut off`);
    fail(502, `the inference upstream sent ${what} past ${MAX_ANSWER_BYTES / MIB} MiB, more than the gateway holds for one call (episode ${env.episode_uuid})`, "upstream_answer_too_large");
  };
  // The client hears what went wrong, the operator's log also where: clients never see the
  // trainer's base URLs (docs/security.md), and a socket error's message names the peer.
  const broke = (what: string, e: unknown, code: string): void => {
    o.logger.warn(`gateway: episode ${env.episode_uuid}: the inference upstream ${withoutCredentials(url)} ${what}: ${describeError(e)}`);
    fail(502, `the inference upstream ${what}: ${failureKind(e)} (episode ${env.episode_uuid})`, code);
  };
  // Only on the error paths and once per stream: parsing URLs on every call would cost the calls that succeed.
  const addresses = (): string[] => [url, o.upstream ?? "", env.trainer_base_url].flatMap(addressForms);
  const secrets = (): string[] => credentialForms(env.trainer_api_key, [url, o.upstream ?? "", env.trainer_base_url]);
  // What an upstream's own words may not carry to the client: where it is, and what it was sent to get in.
  const shown = (text: string): string => hideSecrets(hideAddresses(text, addresses()), secrets());

  let up: Dispatcher.ResponseData;
  try {
    // undici's request rather than fetch: the same client without the WHATWG Response and
    // stream layers, about 0.4 ms less per call here (the gateway is on every relayed call).
    // Without undici's own 300 s bounds on the headers and between body chunks: the envelope's
    // deadline (600 s by default) ends the call, and a model may take longer than 5 minutes.
    up = await request(url, {
      method: env.request === null ? "GET" : "POST",
      headers,
      body: env.request === null ? null : tap !== null ? tap.upstreamBody() : (requestText ?? JSON.stringify(env.request)),
      signal: s.signal,
      headersTimeout: 0,
      bodyTimeout: 0,
    });
  } catch (e) {
    if (s.deadline.aborted) timedOut();
    else if (!s.signal.aborted) broke("could not be reached", e, "upstream_unreachable");
    return;
  }

  const header = up.headers["content-type"];
  // Media types are case-insensitive (RFC 9110): a proxy may send Text/Event-Stream.
  const type = ((Array.isArray(header) ? header[0] : header) ?? "").toLowerCase();
  const ok = up.statusCode >= 200 && up.statusCode < 300;
  if (ok && type.includes("text/event-stream")) {
    // No flushHeaders: the headers go out with the first bytes (until then the Worker keeps
    // its client's stream alive with its own keep-alives).
    res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" });
    tap?.answering(200);
    const batch = writeBatch(res);
    // An error event is `shown` as a whole error answer is; the ledger's tap records what the
    // client gets (as upstreamFailed does), so it reads the stream after the redaction.
    const redaction = new SseRedaction(shown, hiddenTextProbe(addresses(), secrets()));
    const end = new StreamEnd();
    /** Writes what the redaction and the tap still hold, and gives the redaction's last piece. */
    const finish = (): Buffer => {
      const last = redaction.end();
      end.saw(last);
      const tail = last.length === 0 || tap === null ? last : tap.chunk(last);
      if (tail.length > 0) res.write(tail);
      const rest = tap?.endStream() ?? "";
      if (rest !== "") res.write(rest);
      batch.flush();
      return last;
    };
    try {
      for await (const chunk of up.body) {
        const told = redaction.push(chunk as Buffer);
        if (redaction.heldBytes > MAX_ANSWER_BYTES) {
          batch.flush();
          tap?.endStream();
          answerTooLarge("an event of its stream");
          return;
        }
        if (told.length === 0) continue;
        end.saw(told);
        const piece = tap === null ? told : tap.chunk(told);
        if (piece.length === 0) continue;
        batch.open();
        // A slow reader holds the upstream back; a reader that hung up ends the copy (and,
        // through s.signal, the upstream request).
        if (!res.write(piece)) await drainedOrClosed(res, s.signal);
        if (res.destroyed) return;
        if (s.deadline.aborted && res.writableNeedDrain) {
          // Its deadline passed while its client read nothing: the call ends as timed out all the
          // same, and the bytes it could not take are let go with its connection.
          batch.flush();
          tap?.endStream();
          timedOut();
          res.destroy();
          return;
        }
      }
      const last = finish();
      if (end.ended()) {
        res.end();
        return;
      }
      // A clean end without [DONE] or a finish_reason is a model server or proxy that died or
      // timed out: the client hears so, and the ledger records no turn of the half answer.
      const why = "its stream stopped with neither a finish_reason nor its end-of-stream event";
      o.logger.warn(`gateway: episode ${env.episode_uuid}: the inference upstream ${withoutCredentials(url)} broke off mid-stream: ${why}`);
      // A last event without its blank line would run into the error event.
      if (last.length > 0) res.write("\n\n");
      fail(502, `the inference upstream broke off mid-stream: ${why} (episode ${env.episode_uuid})`, "upstream_stream_broken");
    } catch (e) {
      // The answer was whole (its finish_reason or [DONE] came) when the connection broke: the
      // client gets it as it is, and no error event its SDK would raise on.
      if (end.ended() && !s.deadline.aborted && !s.signal.aborted) {
        finish();
        res.end();
        return;
      }
      batch.flush();
      tap?.endStream();
      if (s.deadline.aborted) timedOut();
      else if (!s.signal.aborted) broke("broke off mid-stream", e, "upstream_stream_broken");
      else res.destroy();
    }
    return;
  }

  let text: string;
  try {
    const read = await boundedText(up.body, MAX_ANSWER_BYTES);
    if (read === null) return answerTooLarge("its answer");
    text = read;
  } catch (e) {
    if (s.deadline.aborted) timedOut();
    else if (!s.signal.aborted) broke("broke off its answer", e, "upstream_broken");
    return;
  }
  /**
   * The upstream's own error: an OpenAI error goes through as it is, but for the upstream's own
   * address and the trainer's key, should it name them; anything else is worded as `answered`.
   * Either way with the upstream's word on when to try again (a 429's Retry-After).
   */
  const passError = (status: number, errorText: string, answered: string): void => {
    const told = shown(errorText);
    // Named without the episode a session path puts in it: one line per upstream, not per episode.
    errors.note(withoutCredentials(o.sessionPath ? (upstreamUrl(env, { ...o, sessionPath: false }) ?? url) : url), status, told);
    const retry = retryHeaders((name) => {
      const v = up.headers[name];
      // Sent twice, it says nothing certain.
      return typeof v === "string" ? v : undefined;
    });
    if (isOpenAIErrorText(told)) {
      tap?.upstreamFailed(status, told);
      sendJson(res, status, told, retry);
    } else fail(status, `the inference upstream answered ${answered}: ${headOf(told, 300)}`, "upstream_error", retry);
  };
  if (!ok) {
    // A 404 for a model it does not serve, a 400 for a bad request; SGLang's (and older vLLM's)
    // flat {"object": "error"} made the OpenAI error it stands for, as when it comes with a 200.
    const flat = parseJson(text);
    const asOpenAI = isRecord(flat) && flat["object"] === "error" ? errorInOk(flat) : null;
    passError(up.statusCode >= 400 ? up.statusCode : 502, asOpenAI?.text ?? text, String(up.statusCode));
    return;
  }
  const parsed = parseJson(text);
  const failure = errorInOk(parsed);
  if (failure !== null) {
    // Servers that report a failure with a 200 (vLLM's {"object": "error"}, a proxy's {"error": ...}):
    // passed on as a 200, the client would take the error for a completion.
    passError(failure.status, failure.text, "200 with an error");
    return;
  }
  // Parsed once: the tap records (and may rewrite) the value already read.
  const answer = tap === null ? (isRecord(parsed) ? text : null) : tap.whole(text, parsed === NOT_JSON ? null : parsed);
  if (answer === null) {
    fail(502, `the inference upstream answered something that is not a JSON object: ${headOf(shown(text), 200)}`, "upstream_garbage");
    return;
  }
  tap?.answering(200);
  if (tap?.streamsItself) res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" }).end(answer);
  else sendJson(res, 200, answer);
}

/**
 * Makes what the copy writes in one turn of the event loop (the headers, chunks that arrived
 * together) one socket write. Each write to the Worker on loopback wakes workerd to read it;
 * on this VM the syscall that does so costs a few hundred microseconds, more than the copying.
 * Chunks that arrive apart (tokens as a model generates them) still go out in their own turn.
 * With node:crypto's HMAC for the signature check (server.ts), a paired A/B of two gateways
 * gave -0.56 +- 0.09 ms per streamed call, faster in 8 rounds of 8 (BENCHMARKS.md).
 * `flush()` must come before `end()`: Node 22 writes the chunked terminator of an `end()` while
 * corked ahead of the chunks still held, which cuts off the stream's last event (tested).
 */
function writeBatch(res: ServerResponse): { open(): void; flush(): void } {
  let corked = false;
  const flush = (): void => {
    if (!corked) return;
    corked = false;
    res.uncork();
  };
  return {
    open: () => {
      if (corked) return;
      corked = true;
      res.cork();
      setImmediate(flush);
    },
    flush,
  };
}

const MIB = 1024 * 1024;
/**
 * What one call's answer may make the gateway hold: a whole answer (it is read, then checked and
 * rewritten), or one event of a stream (events are judged whole). A model's longest answers, with
 * a logprob per token, are a few MiB; an upstream or proxy sending without end must not fill the
 * GPU host's memory until the call's deadline.
 */
export const MAX_ANSWER_BYTES = 64 * MIB;

/** A body read whole as UTF-8 (a BOM dropped, as undici's text() does); null past `most` bytes, the body destroyed. */
async function boundedText(body: AsyncIterable<Buffer> & { destroy(): void }, most: number): Promise<string | null> {
  const parts: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of body) {
    bytes += chunk.length;
    if (bytes > most) {
      body.destroy();
      return null;
    }
    parts.push(chunk);
  }
  const text = Buffer.concat(parts, bytes).toString("utf8");
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

/** Until the client took what it was written, hung up, or the call was stopped (its deadline passed). */
function drainedOrClosed(res: ServerResponse, stop: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      res.off("drain", done);
      res.off("close", done);
      stop.removeEventListener("abort", done);
      resolve();
    };
    res.on("drain", done);
    res.on("close", done);
    if (stop.aborted) done();
    else stop.addEventListener("abort", done);
  });
}

const NOT_JSON = Symbol("not JSON");

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return NOT_JSON;
  }
}

/**
 * A 200 answer that is an error, with the status it stands for and the text to pass on: an
 * OpenAI error object as it is, vLLM's flat {"object": "error", message, type, code} as one.
 * The status is the one the error names (vLLM's `code`) when that is an HTTP error status, else
 * 502: the upstream failed the call. Null for anything else.
 */
function errorInOk(v: unknown): { status: number; text: string } | null {
  const fields = isRecord(v) ? errorFields(v) : null;
  if (fields === null) return null;
  const code = fields["code"];
  const status = typeof code === "number" && Number.isInteger(code) && code >= 400 && code <= 599 ? code : 502;
  const message = typeof fields["message"] === "string" ? fields["message"] : JSON.stringify(fields);
  const error = { message, type: typeof fields["type"] === "string" ? fields["type"] : "upstream_error", param: openAIFieldText(fields["param"]), code: openAIFieldText(fields["code"]) };
  return { status, text: JSON.stringify({ error }) };
}
