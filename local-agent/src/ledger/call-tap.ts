/**
 * One relayed call watched for the ledger: what was asked, what the client got, when, and (with
 * capture `tokens`) the token ids. The gateway makes a tap only for a call the Worker asked to
 * record, or, with capture off, for one of a claim that had calls captured: that tap only sees
 * the call's status and times (the recorder keeps a stub), and passes the request and the answer
 * through untouched and unread, as the gateway's plain path does. For an HTTP upstream with
 * capture `tokens` the tap also rewrites: the request gains the dialect's token fields, the
 * answer loses them again (token-fields.ts). A streamed call is asked for its usage (OpenAI
 * clients do not ask by default, and the ledger counts tokens by it): the last chunk, which
 * carries only the usage, is taken out again when the client did not ask.
 */
import { StringDecoder } from "node:string_decoder";
import type { CallContext, TokenDialect } from "../../../src/protocol/ledger";
import type { RelayEnvelope } from "../../../src/protocol/relay";
import { asksStreamUsage, completionToChunks } from "../../../src/relay/completion-chunk";
import { errorOf, namedEventError, StreamAssembly, wholeAnswer, type AnswerParts } from "./answer";
import { clientAsked, stripTokenFields, TokenCollector, tokenRequest, upstreamStreams, type ClientAsked } from "./token-fields";
import { isRecord } from "../../../src/protocol/record";
import { headOf } from "../../../src/protocol/limits";

type Obj = Record<string, unknown>;

export type CallTokenData = { prompt: number[]; completion: number[]; logprobs: number[] };

/** A finished call, as the recorder takes it. */
export type FinishedCall = {
  env: RelayEnvelope;
  call: CallContext;
  request: Obj;
  /** Bytes of the request's JSON: what its messages cost to keep for the next call's delta. */
  requestBytes: number;
  startedAt: number;
  firstByteAt: number | null;
  doneAt: number;
  status: number;
  error: string | null;
  answer: AnswerParts;
  tokens: CallTokenData | null;
};

/** `request` asking for usage in its stream, with whatever else its stream_options ask. */
function withStreamUsage(request: Obj): Obj {
  const options = isRecord(request["stream_options"]) ? request["stream_options"] : {};
  return { ...request, stream_options: { ...options, include_usage: true } };
}

/** The same for the request's own JSON text without stream_options: one field more, rather than the request serialized again. */
const withStreamUsageText = (text: string): string => `${text.slice(0, text.lastIndexOf("}"))},"stream_options":{"include_usage":true}}`;

/** The chunk a stream asked for usage ends with: no choices, only the usage (OpenAI's shape, vLLM's and SGLang's). */
const isUsageChunk = (chunk: Obj): boolean => Array.isArray(chunk["choices"]) && chunk["choices"].length === 0 && isRecord(chunk["usage"]);

/**
 * Where the first event in `text` ends (`at`) and the next begins (`next`, past the blank line),
 * or null when no event is complete yet. The tap is handed whole events (SseRedaction), so a CR
 * that ends `text` ends its line, as it does for an SSE client: an event whose CRLF blank line
 * was split after the CR goes on at once, not with the model's next one; the LF that follows
 * comes at the head of the next piece, an empty line that ends nothing.
 */
function eventEnd(text: string): { at: number; next: number } | null {
  const m = BLANK_LINE.exec(text);
  return m === null ? null : { at: m.index, next: m.index + m[0].length };
}
const BLANK_LINE = /(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)/;

const NO_ANSWER: AnswerParts = { message: null, finishReason: null, usage: null, error: null };

/** An event's data lines, joined by LF (SSE), as a JSON object; null when it has none or they are not one. */
function eventValue(block: string): Obj | null {
  const data = block.split("\n").filter((l) => l.startsWith("data:"));
  return data.length === 0 ? null : parseObject(data.map((l) => l.slice(l.startsWith("data: ") ? 6 : 5)).join("\n").trim());
}

/**
 * The first OpenAI error among the events of `text`, or null. The gateway hands the tap whole
 * events (SseRedaction), the stream's last one perhaps without its blank line: read as one too.
 */
function streamError(text: string): string | null {
  let rest = text;
  for (let end = eventEnd(rest); end !== null; end = eventEnd(rest)) {
    const error = eventError(rest.slice(0, end.at));
    if (error !== null) return error;
    rest = rest.slice(end.next);
  }
  return rest.trim() === "" ? null : eventError(rest);
}

function eventError(block: string): string | null {
  const b = block.replace(/\r\n?/g, "\n");
  const value = eventValue(b);
  if (NAMED_ERROR.test(b)) return namedEventError(value);
  return value === null ? null : errorOf(value);
}

/** An SSE event's name line when it is `error`. */
const NAMED_ERROR = /^event: ?error$/m;
/** What a piece of a stream holds when it may carry an error (errorOf's shapes, or a named event). */
const ERROR_MARKS = ['"error"', "event:"];

function parseObject(text: string): Obj | null {
  try {
    const v: unknown = JSON.parse(text);
    return isRecord(v) ? v : null;
  } catch {
    return null;
  }
}

export class CallTap {
  private status = 0;
  private error: string | null = null;
  private firstByteAt: number | null = null;
  private parts: AnswerParts = NO_ANSWER;
  private readonly collector: TokenCollector | null;
  /** Set when the gateway asks the upstream for tokens and so must take them out again. */
  private readonly rewrite: { dialect: TokenDialect; asked: ClientAsked } | null;
  /** Set when the gateway asks the upstream to stream usage that the client did not ask for. */
  private readonly addsUsage: boolean;
  /**
   * `splitCrlf`: the last event ended the piece with the CR of a CRLF whose LF may head the next
   * piece, and whether that LF goes on (`keep`: the event did) or not (`drop`: it was left out).
   */
  private stream: { assembly: StreamAssembly; decoder: StringDecoder; pending: string; splitCrlf: "keep" | "drop" | null } | null = null;
  /** Capture off: the call's status and times only, its request and answer neither read nor changed. */
  private readonly statusOnly: boolean;

  constructor(
    readonly env: RelayEnvelope & { request: Obj },
    readonly call: CallContext,
    private readonly requestText: string | null,
    /** The HTTP upstream's dialect when the gateway asks it for tokens; null: record what comes. */
    dialect: TokenDialect | null,
    private readonly now: () => number,
    readonly startedAt: number,
  ) {
    const tokens = call.capture === "tokens";
    this.statusOnly = call.capture === "off";
    this.collector = tokens ? new TokenCollector() : null;
    // An echo asked with token ids comes back without its prompt's text (vLLM): the client's answer
    // would not be the one it asked for. Such a call is recorded without tokens, unless its client
    // asked for them itself.
    const echo = env.endpoint === "/v1/completions" && env.request["echo"] === true;
    this.rewrite = tokens && dialect !== null && !echo ? { dialect, asked: clientAsked(dialect, env.endpoint, env.request) } : null;
    this.addsUsage = !this.statusOnly && env.request["stream"] === true && !asksStreamUsage(env.request) && !this.streamsItself;
  }

  /** The request's JSON for the upstream. */
  upstreamBody(): string {
    const request = this.env.request;
    if (this.rewrite !== null) {
      const asked = tokenRequest(this.rewrite.dialect, this.env.endpoint, request);
      return JSON.stringify(this.addsUsage ? withStreamUsage(asked) : asked);
    }
    if (!this.addsUsage) return this.requestText ?? JSON.stringify(request);
    if (this.requestText !== null && request["stream_options"] === undefined) return withStreamUsageText(this.requestText);
    return JSON.stringify(withStreamUsage(request));
  }

  /** The client asked for a stream that the upstream is asked for whole (SGLang with tokens): the gateway streams it. */
  get streamsItself(): boolean {
    return this.rewrite !== null && this.env.request["stream"] === true && !upstreamStreams(this.rewrite.dialect, this.env.request);
  }

  /** The answer's status line goes out now. */
  answering(status: number): void {
    this.status = status;
    this.firstByteAt = this.now();
  }

  failed(status: number, code: string | null, message: string): void {
    if (this.status === 0) this.status = status;
    this.error ??= `${code ?? "error"}: ${message}`;
  }

  /** The upstream's own OpenAI error, passed to the client as it is. */
  upstreamFailed(status: number, text: string): void {
    if (this.status === 0) this.status = status;
    this.error ??= errorOf(parseObject(text) ?? {}) ?? `upstream_error: ${headOf(text, 300)}`;
  }

  /**
   * A whole answer: recorded, and returned as the client gets it (without the token fields it
   * did not ask for; as a stream when `streamsItself`), or null when it is not a JSON object.
   * `parsed`: the text's value when the caller has parsed it already (it may be changed here).
   */
  whole(text: string, parsed?: unknown): string | null {
    const answer = parsed === undefined ? parseObject(text) : isRecord(parsed) ? parsed : null;
    if (answer === null) return null;
    if (this.statusOnly) return text;
    this.parts = wholeAnswer(this.env.endpoint, answer);
    this.collector?.read(answer);
    if (this.rewrite === null) return text;
    stripTokenFields(answer, this.rewrite.asked);
    if (this.streamsItself) return `${completionToChunks(answer, asksStreamUsage(this.env.request)).map((c) => `data: ${JSON.stringify(c)}\n\n`).join("")}data: [DONE]\n\n`;
    return JSON.stringify(answer);
  }

  /**
   * One piece of an SSE answer: what to send the client (the piece itself unless the tap
   * rewrites). Lines may end in CRLF, LF or CR (SSE allows all three). An event the tap does not
   * rewrite goes on as it came, line ends and all; one it rewrites goes on with LF.
   */
  chunk(piece: Buffer): Buffer | string {
    if (this.statusOnly) {
      // Capture off reads nothing of the answer but whether it failed: an error event in a 200
      // stream fails the call, as it does a captured one, and a failed call is no turn (no stub:
      // recorder.ts). Only a piece that names an error is read; the gateway's redaction hands on whole events.
      if (this.error === null && ERROR_MARKS.some((m) => piece.includes(m))) this.error = streamError(piece.toString("utf8"));
      return piece;
    }
    const s = (this.stream ??= { assembly: new StreamAssembly(this.env.endpoint), decoder: new StringDecoder("utf8"), pending: "", splitCrlf: null });
    s.pending += s.decoder.write(piece);
    let out = "";
    // The LF of the last event's CRLF goes on with that event's bytes, whatever becomes of the next (the usage chunk, left out).
    if (s.splitCrlf !== null && s.pending !== "") {
      if (s.pending.startsWith("\n")) {
        s.pending = s.pending.slice(1);
        if (this.rewrite === null && s.splitCrlf === "keep") out += "\n";
      }
      s.splitCrlf = null;
    }
    for (let end = eventEnd(s.pending); end !== null; end = eventEnd(s.pending)) {
      const raw = s.pending.slice(0, end.next);
      const shown = this.event(s.pending.slice(0, end.at), s.assembly);
      s.pending = s.pending.slice(end.next);
      s.splitCrlf = s.pending === "" && raw.endsWith("\r") ? (shown === null ? "drop" : "keep") : null;
      if (shown !== null) out += this.rewrite === null ? raw : `${shown}\n\n`;
    }
    return this.rewrite === null && !this.addsUsage ? piece : out;
  }

  /** The stream ended: what is left to send (a last event without its blank line). */
  endStream(): string {
    const s = this.stream;
    if (s === null) return "";
    const rest = s.pending + s.decoder.end();
    s.pending = "";
    const shown = rest === "" ? null : this.event(rest, s.assembly);
    this.parts = s.assembly.result();
    if (this.rewrite === null && !this.addsUsage) return "";
    return shown === null ? "" : this.rewrite === null ? rest : shown;
  }

  /**
   * Reads one event; returns it as the client gets it (rewritten only with `rewrite`), or null
   * when the client does not get it. Its data lines are one value, joined by LF (SSE).
   */
  private event(rawBlock: string, assembly: StreamAssembly): string | null {
    const block = rawBlock.replace(/\r\n?/g, "\n");
    const answer = eventValue(block);
    if (this.error === null && NAMED_ERROR.test(block)) this.error = namedEventError(answer);
    if (answer === null) return block;
    assembly.read(answer);
    this.collector?.read(answer);
    if (this.addsUsage && isUsageChunk(answer)) return null;
    if (this.rewrite === null) return block;
    stripTokenFields(answer, this.rewrite.asked);
    // One data line for the value, where its first line was.
    const lines = block.split("\n");
    const first = lines.findIndex((l) => l.startsWith("data:"));
    return lines.flatMap((l, i) => (i === first ? [`data: ${JSON.stringify(answer)}`] : l.startsWith("data:") ? [] : [l])).join("\n");
  }

  /** The call is over; `clientGone`: the client hung up before its answer was complete. */
  finish(clientGone: boolean): FinishedCall {
    if (this.stream !== null && this.parts === NO_ANSWER) this.parts = this.stream.assembly.result();
    if (clientGone) this.failed(499, "client_closed", "the client hung up before its answer was complete");
    if (this.status === 0) this.failed(500, "gateway_error", "the gateway ended the call without an answer");
    const error = this.error ?? this.parts.error;
    const tokens = this.collector?.result() ?? null;
    const usage = this.parts.usage ?? (tokens === null ? null : { prompt_tokens: tokens.prompt.length, completion_tokens: tokens.completion.length });
    return {
      env: this.env,
      call: this.call,
      request: this.env.request,
      requestBytes: this.requestText?.length ?? JSON.stringify(this.env.request).length,
      startedAt: this.startedAt,
      firstByteAt: this.firstByteAt,
      doneAt: this.now(),
      status: this.status,
      error,
      answer: { ...this.parts, usage },
      tokens,
    };
  }
}
