/**
 * The answer of a call as the ledger records it: the message (a stream's deltas assembled), its
 * finish_reason and usage. Choice 0 only: agents ask for one answer, and the next call continues
 * that one.
 */
import type { RelayEndpoint } from "../../../src/protocol/relay";
import { firstChoice } from "./token-fields";
import { errorFields } from "../gateway/errors";
import { isRecord } from "../../../src/protocol/record";
import type { CallUsage } from "../../../src/protocol/ledger";

type Obj = Record<string, unknown>;

export type Usage = CallUsage;

export type AnswerParts = { message: Obj | null; finishReason: string | null; usage: Usage | null; error: string | null };

const count = (v: unknown): number | null => (Number.isInteger(v) && (v as number) >= 0 ? (v as number) : null);

/** A usage's detail, `details.field` (OpenAI's prompt_tokens_details and completion_tokens_details). */
function detail(details: unknown, field: string): number | null {
  return isRecord(details) ? count(details[field]) : null;
}

function usageOf(v: unknown): Usage | null {
  if (!isRecord(v)) return null;
  const p = count(v["prompt_tokens"]);
  const c = count(v["completion_tokens"]);
  if (p === null || c === null) return null;
  const cached = detail(v["prompt_tokens_details"], "cached_tokens");
  // SGLang says it at the top of its usage (UsageInfo.reasoning_tokens; its completion details hold speculative decoding's counts).
  const reasoning = detail(v["completion_tokens_details"], "reasoning_tokens") ?? count(v["reasoning_tokens"]);
  return { prompt_tokens: p, completion_tokens: c, ...(cached === null ? {} : { cached_tokens: cached }), ...(reasoning === null ? {} : { reasoning_tokens: reasoning }) };
}

/** `code: message` of an error's fields. */
function errorText(fields: Obj): string {
  return `${String(fields["code"] ?? fields["type"] ?? "upstream_error")}: ${String(fields["message"] ?? "")}`;
}

/**
 * The error an answer or an event carries, as `code: message`, in each shape the gateway takes
 * for one (gateway/errors.ts errorFields, as the stream's end and a 200's error read it).
 */
export function errorOf(v: Obj): string | null {
  const fields = errorFields(v);
  return fields === null ? null : errorText(fields);
}

/** The error of an SSE event named `error` (an upstream's own way to end a stream with one), whatever its data. */
export function namedEventError(value: Obj | null): string {
  if (value === null) return "upstream_error: the upstream ended the stream with an error event";
  return errorOf(value) ?? (typeof value["message"] === "string" ? errorText(value) : `upstream_error: ${JSON.stringify(value)}`);
}

export function wholeAnswer(endpoint: RelayEndpoint, answer: Obj): AnswerParts {
  const choice = firstChoice(answer);
  const finish = choice?.["finish_reason"];
  let message: Obj | null = null;
  if (choice !== null) {
    if (endpoint === "/v1/completions") message = { role: "assistant", content: typeof choice["text"] === "string" ? choice["text"] : "" };
    else if (isRecord(choice["message"])) message = choice["message"];
  }
  return { message, finishReason: typeof finish === "string" ? finish : null, usage: usageOf(answer["usage"]), error: errorOf(answer) };
}

/**
 * Text a delta carries beside its content, concatenated as content is: a thinking model's
 * reasoning, by the field it came in (vLLM's `reasoning_content`, or `reasoning`, vLLM's newer
 * name and OpenRouter's), and OpenAI's `refusal`.
 */
const TEXT_FIELDS = ["reasoning_content", "reasoning", "refusal"] as const;

type ToolCallParts = { id: string; type: string | null; name: string; arguments: string };

/** Chunks of a stream, assembled: content concatenated, tool calls merged by index. */
export class StreamAssembly {
  private role: string | null = null;
  private content = "";
  /** The delta's other text, by field (TEXT_FIELDS). */
  private readonly texts = new Map<string, string>();
  private readonly toolCalls = new Map<number, ToolCallParts>();
  private finishReason: string | null = null;
  private usage: Usage | null = null;
  private error: string | null = null;
  private sawChoice = false;

  constructor(private readonly endpoint: RelayEndpoint) {}

  read(chunk: Obj): void {
    this.error ??= errorOf(chunk);
    this.usage = usageOf(chunk["usage"]) ?? this.usage;
    const choice = firstChoice(chunk);
    if (choice === null) return;
    this.sawChoice = true;
    if (typeof choice["finish_reason"] === "string") this.finishReason = choice["finish_reason"];
    if (this.endpoint === "/v1/completions") {
      if (typeof choice["text"] === "string") this.content += choice["text"];
      return;
    }
    const delta = choice["delta"];
    if (!isRecord(delta)) return;
    if (typeof delta["role"] === "string") this.role = delta["role"];
    if (typeof delta["content"] === "string") this.content += delta["content"];
    for (const field of TEXT_FIELDS) {
      const r = delta[field];
      if (typeof r === "string") this.texts.set(field, (this.texts.get(field) ?? "") + r);
    }
    if (Array.isArray(delta["tool_calls"])) for (const tc of delta["tool_calls"]) this.mergeToolCall(tc);
  }

  private mergeToolCall(tc: unknown): void {
    if (!isRecord(tc)) return;
    const index = typeof tc["index"] === "number" ? tc["index"] : this.toolCalls.size;
    const into = this.toolCalls.get(index) ?? { id: "", type: null, name: "", arguments: "" };
    this.toolCalls.set(index, into);
    if (typeof tc["id"] === "string") into.id += tc["id"];
    if (typeof tc["type"] === "string") into.type = tc["type"];
    const f = tc["function"];
    if (isRecord(f)) {
      if (typeof f["name"] === "string") into.name += f["name"];
      if (typeof f["arguments"] === "string") into.arguments += f["arguments"];
    }
  }

  result(): AnswerParts {
    if (!this.sawChoice) return { message: null, finishReason: null, usage: this.usage, error: this.error };
    const message: Obj = { role: this.role ?? "assistant" };
    const calls = [...this.toolCalls.entries()].sort((a, b) => a[0] - b[0]).map(([, c]) => ({ id: c.id, type: c.type ?? "function", function: { name: c.name, arguments: c.arguments } }));
    // As a whole answer has it: no text beside tool calls or a refusal is null content.
    message["content"] = this.content === "" && (calls.length > 0 || (this.texts.get("refusal") ?? "") !== "") ? null : this.content;
    for (const [field, text] of this.texts) message[field] = text;
    if (calls.length > 0) message["tool_calls"] = calls;
    return { message, finishReason: this.finishReason, usage: this.usage, error: this.error };
  }
}
