/**
 * A fake inference server that answers token ids and logprobs in vLLM's or SGLang's exact
 * response shapes, whole and streamed, for the ledger's tests. Its "tokenizer" is a chat
 * template in miniature: a prompt is each message as [ROLE, ...body, END] followed by the
 * assistant's ROLE (the generation prompt); a completion is the answer's body then END, so a
 * conversation sent back whole tokenizes to the previous prompt and completion followed by the
 * new messages, as a real template does. Model "drift" renders earlier assistant turns with an
 * extra token (re-tokenization drift); "crash" breaks a stream off after its first token. A
 * /v1/completions prompt of token ids is taken as its own ids, and answered "echo: #<how many>".
 *
 * Answers: a last message whose content starts with "tool:" is answered with a call of the tool
 * `lookup` with {"q": the rest}; any other with "echo: " and its content.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { bodyText, serveHttp } from "../support/http-server";

export const END = 100_000;
export const ROLE: Record<string, number> = { system: 100_001, user: 100_002, assistant: 100_003, tool: 100_004 };
const DRIFT = 100_009;

/** The logprob the server gives token `id`, deterministic so the tests can check it. */
export const logprobOf = (id: number): number => -((id % 97) + 1) / 64;

const codes = (s: string): number[] => [...s].map((c) => c.codePointAt(0) as number);

type Msg = { role?: string; content?: unknown; tool_calls?: Array<{ function?: { name?: string; arguments?: string } }> };

function body(m: Msg): number[] {
  const call = m.tool_calls?.[0]?.function;
  if (call !== undefined) return codes(`${call.name ?? ""}${call.arguments ?? ""}`);
  return codes(typeof m.content === "string" ? m.content : "");
}

export function promptIds(messages: Msg[], drift = false): number[] {
  const ids: number[] = [];
  for (const m of messages) {
    ids.push(ROLE[m.role ?? "user"] ?? 0);
    if (drift && m.role === "assistant") ids.push(DRIFT);
    for (const id of body(m)) ids.push(id);
    ids.push(END);
  }
  ids.push(ROLE["assistant"] as number);
  return ids;
}

type Answer = { text: string | null; call: { name: string; arguments: string } | null };

function answerFor(messages: Msg[]): Answer {
  const last = messages.at(-1);
  const content = typeof last?.content === "string" ? last.content : "";
  if (content.startsWith("tool:")) return { text: null, call: { name: "lookup", arguments: JSON.stringify({ q: content.slice(5) }) } };
  return { text: `echo: ${content}`, call: null };
}

export type Served = { prompt: number[]; completion: number[]; request: Record<string, unknown> };
export type TokenModel = { url: string; served: Served[]; requests: Record<string, unknown>[]; close(): Promise<void> };

const lpEntry = (id: number) => ({ token: String.fromCodePoint(id < 0x110000 ? id : 63), logprob: logprobOf(id), bytes: [id & 0xff], top_logprobs: [] });

export async function startTokenModel(dialect: "vllm" | "sglang"): Promise<TokenModel> {
  const served: Served[] = [];
  const requests: Record<string, unknown>[] = [];
  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const r = JSON.parse(await bodyText(req)) as Record<string, unknown>;
    requests.push(r);
    const completions = (req.url ?? "").endsWith("/completions") && !(req.url ?? "").endsWith("/chat/completions");
    const model = String(r["model"]);
    // A prompt of token ids is the prompt's ids as given (vLLM's too), answered with how many there were.
    const given = r["prompt"];
    const idsPrompt = completions && Array.isArray(given) && given.every((x) => typeof x === "number") ? (given as number[]) : null;
    const messages: Msg[] = completions ? [{ role: "user", content: idsPrompt === null ? String(given) : `#${idsPrompt.length}` }] : (r["messages"] as Msg[]);
    const answer = answerFor(messages);
    const prompt = idsPrompt ?? promptIds(messages, model === "drift");
    const bodyIds = answer.call ? codes(answer.call.name + answer.call.arguments) : codes(answer.text ?? "");
    const completion = [...bodyIds, END];
    served.push({ prompt, completion, request: r });
    const stream = r["stream"] === true;
    if (dialect === "sglang" && stream && r["return_prompt_token_ids"] === true) {
      res.writeHead(400, { "content-type": "application/json" }).end(JSON.stringify({ object: "error", message: "return_prompt_token_ids is not supported with streaming", type: "BadRequestError", param: null, code: 400 }));
      return;
    }
    const base = { id: "chatcmpl-tok", created: 7, model };
    const finish = answer.call ? "tool_calls" : "stop";
    const message = {
      role: "assistant",
      content: answer.text,
      refusal: null,
      annotations: null,
      audio: null,
      function_call: null,
      tool_calls: answer.call ? [{ id: "chatcmpl-tool-1", type: "function", function: answer.call }] : [],
      reasoning_content: null,
    };
    const usage = { prompt_tokens: prompt.length, total_tokens: prompt.length + completion.length, completion_tokens: completion.length, prompt_tokens_details: null };

    if (!stream) {
      let out: Record<string, unknown>;
      if (dialect === "vllm") {
        const wantIds = r["return_token_ids"] === true;
        // vLLM's echo: the logprobs cover the prompt (its first token's null), then the completion;
        // the text begins with the prompt's, unless token ids were asked (then only the answer's).
        const echo = completions && r["echo"] === true;
        const lpIds = echo ? [...prompt, ...completion] : completion;
        const lpValues = echo ? [null, ...prompt.slice(1).map(logprobOf), ...completion.map(logprobOf)] : completion.map(logprobOf);
        const lp = completions ? (typeof r["logprobs"] === "number" ? { text_offset: lpIds.map((_, i) => i), token_logprobs: lpValues, tokens: lpIds.map((id) => String(id)), top_logprobs: null } : null) : r["logprobs"] === true ? { content: completion.map(lpEntry) } : null;
        const text = `${echo && !wantIds ? String(given) : ""}${answer.text ?? ""}`;
        const choice = completions
          ? { index: 0, text, logprobs: lp, finish_reason: finish, stop_reason: null, prompt_logprobs: null, prompt_token_ids: wantIds ? prompt : null, token_ids: wantIds ? completion : null }
          : { index: 0, message, logprobs: lp, finish_reason: finish, stop_reason: null, token_ids: wantIds ? completion : null };
        out = { ...base, object: completions ? "text_completion" : "chat.completion", choices: [choice], service_tier: null, system_fingerprint: null, usage, prompt_logprobs: null, ...(completions ? {} : { prompt_token_ids: wantIds ? prompt : null }), kv_transfer_params: null };
      } else {
        const choice: Record<string, unknown> = completions
          ? { index: 0, text: answer.text ?? "", logprobs: r["logprobs"] !== undefined ? { token_logprobs: completion.map(logprobOf) } : null, finish_reason: finish, matched_stop: END }
          : { index: 0, message: { role: "assistant", content: answer.text, reasoning_content: null, tool_calls: message.tool_calls.length ? message.tool_calls : null }, logprobs: r["logprobs"] === true ? { content: completion.map(lpEntry) } : null, finish_reason: finish, matched_stop: END };
        if (r["return_prompt_token_ids"] === true) choice["prompt_token_ids"] = prompt;
        if (r["return_meta_info"] === true) choice["meta_info"] = { id: "x", prompt_tokens: prompt.length, completion_tokens: completion.length, output_token_logprobs: completion.map((id) => [logprobOf(id), id, null]) };
        out = { ...base, object: completions ? "text_completion" : "chat.completion", choices: [choice], usage };
      }
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(out));
      return;
    }

    // vLLM's stream: the prompt ids in the first chunk, each chunk's own token ids and logprobs.
    const wantIds = r["return_token_ids"] === true;
    const wantLp = r["logprobs"] === true;
    const chunk = (choice: Record<string, unknown>, extra: Record<string, unknown> = {}): string =>
      `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [{ index: 0, logprobs: null, finish_reason: null, ...choice }], ...extra })}\n\n`;
    const tokenPart = (ids: number[]) => ({ ...(wantLp ? { logprobs: { content: ids.map(lpEntry) } } : {}), ...(wantIds ? { token_ids: ids } : {}) });
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(chunk({ delta: { role: "assistant", content: "" } }, wantIds ? { prompt_token_ids: prompt } : {}));
    if (answer.call) {
      const name = codes(answer.call.name);
      res.write(chunk({ delta: { tool_calls: [{ id: "chatcmpl-tool-1", type: "function", index: 0, function: { name: answer.call.name, arguments: "" } }] }, ...tokenPart(name) }));
      for (const ch of answer.call.arguments) res.write(chunk({ delta: { tool_calls: [{ index: 0, function: { arguments: ch } }] }, ...tokenPart(codes(ch)) }));
    } else {
      for (const ch of answer.text ?? "") {
        res.write(chunk({ delta: { content: ch }, ...tokenPart(codes(ch)) }));
        if (model === "crash") {
          setTimeout(() => res.socket?.destroy(), 20);
          return;
        }
      }
    }
    res.write(chunk({ delta: {}, finish_reason: finish, ...tokenPart([END]) }));
    const so = r["stream_options"] as { include_usage?: boolean } | undefined;
    if (so?.include_usage) res.write(`data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [], usage })}\n\n`);
    res.end("data: [DONE]\n\n");
  }

  const server = await serveHttp(handle);
  return { url: `${server.origin}/v1`, served, requests, close: server.close };
}
