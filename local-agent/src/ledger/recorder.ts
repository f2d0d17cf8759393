/**
 * Turns a finished call into its CallRecord: the body stored as the delta of the earlier call of
 * its claim that it continues (messages after the shared prefix, prompt ids after that call's
 * prompt and completion), cut to the record cap, checked against the protocol, and handed to the
 * shipper. Never throws: a call is answered before it is recorded, and a record that cannot be
 * made is logged and dropped. A successful call relayed with capture off, of a claim that had
 * calls captured, is recorded as a stub: its status and times, nothing it asked or answered.
 */
import { packFloats, packInts } from "../../../src/protocol/packed";
import { continuation, messageDelta, promptContinuation, promptDelta, sequencePrompt, tokenDelta } from "../../../src/ledger/splice";
import { CallRecord, type CallBody, type CaptureMode } from "../../../src/protocol/ledger";
import { headOf, MAX_REQUEST_BODY_BYTES } from "../../../src/protocol/limits";
import { describeError, type Logger } from "../log";
import type { FinishedCall } from "./call-tap";
import { CapturedClaims, ClaimHistory, continuedHead, type LastCall } from "./claim-history";
import { mediaOf, NO_MEDIA, takeMedia, type MediaSet } from "./media";

/**
 * A body whose JSON is larger is recorded truncated (no messages, no tokens, the answer cut).
 * As large as a batch of one record can be (the shipper sends a larger record alone): whole
 * about 400k tokens of context with their ids, where 1.5 MB cut a 150k-token agent's every
 * call after its gateway restarted, its history was evicted or rewritten. The rest of the
 * request is headroom for the record's fields, however escaped, and the batch's.
 */
export const RECORD_BODY_CAP_BYTES = MAX_REQUEST_BODY_BYTES - 64 * 1024;
export const DEFAULT_HISTORY_BYTES = 256 * 1024 * 1024;

/** A record, its size, and the media its messages refer to (uploaded before the batch that carries it: media.ts). */
export type RecordSink = (record: CallRecord, bytes: number, media: MediaSet) => void;

const jsonBytes = (v: unknown): number => Buffer.byteLength(JSON.stringify(v));

/**
 * What a record's fields besides its body take as JSON, measured: an error of 2,000 characters,
 * an episode and a model of 512, ids of 256 each, escaped or in UTF-8, take far more than a fixed
 * guess of 2 KB, and 500 such records made a batch the shipper took for 1.1 MB a 4.3 MB one,
 * refused whole. Serialized without the body, the fields cost little.
 */
const fieldsBytes = (record: CallRecord): number => jsonBytes({ ...record, body: null });

export class CallRecorder {
  readonly history: ClaimHistory;
  /** Claims with a call captured: their calls relayed with capture off are recorded as stubs. */
  private readonly captured: CapturedClaims;
  private failed = 0;

  constructor(
    private readonly o: { historyBytes: number; sink: RecordSink; logger: Logger; capBytes?: number; maxCapturedClaims?: number },
  ) {
    this.history = new ClaimHistory(o.historyBytes);
    this.captured = new CapturedClaims(o.maxCapturedClaims);
  }

  /**
   * Whether the gateway watches a call of the claim relayed with `capture`: always when capture is
   * on (and the claim is then noted as captured, from the call's start, so that a concurrent call
   * with capture off is not missed); with capture off, only for a claim that had calls captured.
   * A watched call with capture off is recorded as a stub if it succeeds (record).
   */
  watches(episode: string, fence: number, capture: CaptureMode): boolean {
    const key = ClaimHistory.key(episode, fence);
    if (capture === "off") return this.captured.has(key);
    this.captured.add(key);
    return true;
  }

  /** Calls answered whose record could not be made (each logged), since the agent started. */
  get unrecorded(): number {
    return this.failed;
  }

  record(call: FinishedCall): void {
    try {
      if (call.call.capture === "off") this.stub(call);
      else this.build(call);
    } catch (e) {
      this.failed++;
      this.o.logger.warn(`ledger: could not record call ${call.call.call_id} of episode ${call.env.episode_uuid}: ${describeError(e)}`);
    }
  }

  /**
   * A call relayed with capture off: the operator asked for nothing it said to be kept, yet the
   * claim's trajectory must not read as if the turn never happened (its completion would come in
   * as prompt tokens of the next captured call, or the claim's tail go unseen). A successful one
   * is recorded as a stub (`uncaptured`); a failed one is not a turn, and is not recorded. The
   * claim's heads stay as they were: the next captured call is stored against the calls before.
   */
  private stub(c: FinishedCall): void {
    if (c.status !== 200 || c.error !== null) return;
    const body: CallBody = { params: {}, tools: null, tools_from_prefix: false, prefix: null, messages: [], answer: null, tokens: null, uncaptured: true };
    const record = this.checked(c, body, { finishReason: null, usage: null, truncated: false });
    this.o.sink(record, jsonBytes(body) + fieldsBytes(record), NO_MEDIA);
  }

  private build(c: FinishedCall): void {
    const key = ClaimHistory.key(c.env.episode_uuid, c.env.fence);
    const heads = this.history.heads(key);
    const { messages: rawMessages, tools: rawTools, ...params } = c.request;
    // Compared, held and stored with its media as references: a screenshot is stored once, not in every call after it.
    const taken = takeMedia(Array.isArray(rawMessages) ? rawMessages : []);
    const messages = taken.messages;
    const tools = Array.isArray(rawTools) ? rawTools : null;
    const toolsJson = tools === null ? null : JSON.stringify(tools);

    // On /v1/completions the whole history is the prompt (text or token ids): it is stored as a
    // delta instead. A batch of prompts (a list of strings or of id lists) is stored whole.
    const prompt = c.env.endpoint === "/v1/completions" ? sequencePrompt(params["prompt"]) : null;
    const base = continuedHead(heads, messages, prompt);
    const md = messageDelta(messages, base === null ? null : base.conversation);
    const prefix = md.prefixCount === null || base === null ? null : { call_id: base.call_id, count: md.prefixCount };
    // The tools are the prefix call's: a reader finds them there.
    const toolsFromPrefix = prefix !== null && toolsJson !== null && toolsJson === base?.toolsJson;
    let tokens: CallBody["tokens"] = null;
    if (c.tokens !== null) {
      // No head continued by messages or text: the claim's latest call, whose ids it may still continue (a prompt of ids).
      const prev = base ?? heads.at(-1);
      const td = tokenDelta(c.tokens.prompt, prev?.prompt == null ? null : [...prev.prompt, ...prev.completion]);
      tokens = {
        prompt_prefix: td.prefixCount === null || prev === undefined ? null : { call_id: prev.call_id, count: td.prefixCount },
        prompt_ids: packInts(td.rest),
        completion_ids: packInts(c.tokens.completion),
        completion_logprobs: packFloats(c.tokens.logprobs),
      };
    }
    const whole: CallBody = {
      params: prompt === null ? params : { ...params, prompt: promptDelta(prompt, base?.completionPrompt == null ? null : { call_id: base.call_id, ...base.completionPrompt }) },
      tools: toolsFromPrefix ? null : tools,
      tools_from_prefix: toolsFromPrefix,
      prefix,
      messages: md.rest,
      answer: c.answer.message,
      tokens,
    };
    const fitted = fitBody(whole, this.o.capBytes ?? RECORD_BODY_CAP_BYTES);
    const record = this.checked(c, fitted.body, { finishReason: c.answer.finishReason, usage: c.answer.usage, truncated: fitted.truncated });
    // Only a call recorded whole can be continued from; a truncated one keeps neither messages nor
    // tokens, and its successor still continues the head it continued. A failed call stays beside
    // that head: the client's retry continues the head, not the failed answer.
    if (!fitted.truncated) {
      const entry: LastCall = {
        call_id: c.call.call_id,
        conversation: prompt === null ? continuation(messages, c.answer.message) : [],
        completionPrompt: prompt === null ? null : promptContinuation(prompt, c.answer.message, c.tokens?.completion ?? null),
        toolsJson,
        prompt: c.tokens?.prompt ?? null,
        completion: c.tokens?.completion ?? [],
        bytes: c.requestBytes - taken.bytes + (c.answer.message === null ? 0 : jsonBytes(c.answer.message)) + 8 * ((c.tokens?.prompt.length ?? 0) + (c.tokens?.completion.length ?? 0)),
      };
      const succeeded = c.status === 200 && c.error === null;
      this.history.add(key, entry, succeeded ? (base?.call_id ?? null) : null);
    }
    const media = fitted.truncated ? NO_MEDIA : mediaOf(fitted.body.messages, taken.media);
    this.o.sink(record, fitted.bytes + fieldsBytes(record), media);
  }

  /** The call's record with `body`, checked against the protocol (throws when it does not hold). */
  private checked(c: FinishedCall, body: CallBody, o: RecordFields): CallRecord {
    const model = c.request["model"];
    const parsed = CallRecord.safeParse({
      ...c.call,
      episode_uuid: c.env.episode_uuid,
      fence: c.env.fence,
      endpoint: c.env.endpoint,
      model: typeof model === "string" ? headOf(model, 512) : "",
      stream: c.request["stream"] === true,
      started_at: c.startedAt,
      first_byte_at: c.firstByteAt,
      done_at: Math.max(c.doneAt, c.startedAt),
      status: c.status,
      error: c.error === null ? null : headOf(c.error, 2000),
      finish_reason: o.finishReason === null ? null : headOf(o.finishReason, 64),
      usage: o.usage,
      truncated: o.truncated,
      body,
    });
    if (!parsed.success) throw new Error(parsed.error.issues.slice(0, 3).map((i) => `${i.path.join(".")}: ${i.message}`).join("; "));
    return parsed.data;
  }
}

type RecordFields = { finishReason: string | null; usage: CallRecord["usage"]; truncated: boolean };

/**
 * The body within `cap` bytes of JSON: whole when it fits, else without messages and tokens and
 * with the answer's text cut, then also without tool calls, then without tools and sampling
 * parameters. Sizes are taken piecewise: the whole body is serialized once.
 */
export function fitBody(body: CallBody, cap: number): { body: CallBody; truncated: boolean; bytes: number } {
  const size = jsonBytes(body);
  if (size <= cap) return { body, truncated: false, bytes: size };
  const bare: CallBody = { ...body, prefix: null, messages: [], tokens: null };
  const answer = bare.answer;
  const shells: CallBody[] = [bare];
  if (answer !== null) shells.push({ ...bare, answer: { role: answer["role"] ?? "assistant", content: answer["content"] ?? null } });
  shells.push({ ...shells.at(-1)!, params: typeof bare.params["model"] === "string" ? { model: bare.params["model"] } : {}, tools: null, tools_from_prefix: false });
  for (const shell of shells) {
    if (shell.answer === null || typeof shell.answer["content"] !== "string") {
      const n = jsonBytes(shell);
      if (n <= cap) return { body: shell, truncated: true, bytes: n };
      continue;
    }
    const text = shell.answer["content"];
    const emptied = { ...shell, answer: { ...shell.answer, content: "" } };
    const room = cap - jsonBytes(emptied);
    if (room < 0) continue;
    const cut = cutText(text, room);
    return { body: { ...shell, answer: { ...shell.answer, content: cut.text } }, truncated: true, bytes: cap - room + cut.bytes };
  }
  const last: CallBody = { ...shells.at(-1)!, answer: null };
  return { body: last, truncated: true, bytes: jsonBytes(last) };
}

/**
 * The longest start of `text` (found by shrinking) whose JSON string body takes at most `room`
 * bytes, never ending on the first half of a surrogate pair (headOf).
 */
function cutText(text: string, room: number): { text: string; bytes: number } {
  let n = Math.min(text.length, room);
  for (;;) {
    const t = headOf(text, n);
    const bytes = Buffer.byteLength(JSON.stringify(t)) - 2;
    if (bytes <= room || n === 0) return { text: t, bytes };
    n = Math.floor(n * Math.min(0.99, room / bytes));
  }
}
