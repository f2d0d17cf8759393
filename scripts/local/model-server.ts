/**
 * A tiny OpenAI-compatible model server for the gateway's tests and the relay benchmarks:
 * deterministic answers ("echo: <last user message>"), streaming, a fixed latency, and the
 * faults an upstream can have, chosen by model name: "hang" (never answers), "crash" (breaks
 * off mid-stream), "garbage" (HTML), any unknown name (404 model_not_found, as vLLM answers).
 * "drip" streams `dripTokens` tokens `dripMs` apart (default 1 ms), each its own chunk, as a
 * model generating them does (the others write their whole stream at once).
 * Asked vLLM's `return_token_ids` and `logprobs`, it answers them in vLLM's fields (the prompt's
 * ids top-level, each choice or chunk its own ids and `logprobs.content`), one token id for
 * every four characters, so the relay benchmark can time capture `tokens` against a real shape.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { bodyText, serveHttp } from "./http-server";

export const SERVED_MODELS = ["tiny", "hang", "crash", "garbage", "drip"];

export type SeenRequest = { method: string; path: string; authorization: string | undefined; episode: string | undefined; body: Record<string, unknown> | null };

export type ModelServer = { url: string; seen: SeenRequest[]; close(): Promise<void> };

type Message = { role?: unknown; content?: unknown };

export function lastUserText(body: Record<string, unknown> | null): string {
  const messages = Array.isArray(body?.["messages"]) ? (body["messages"] as Message[]) : [];
  const last = [...messages].reverse().find((m) => m.role === "user");
  return typeof last?.content === "string" ? last.content : "";
}

export function completion(model: string, content: string): Record<string, unknown> {
  return {
    id: "chatcmpl-test",
    object: "chat.completion",
    created: 1,
    model,
    choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
    usage: { prompt_tokens: 1, completion_tokens: content.split(" ").length, total_tokens: 1 + content.split(" ").length },
  };
}

/** A stand-in tokenizer: one id per four characters. */
export function tokenIds(text: string): number[] {
  const ids: number[] = [];
  for (let i = 0; i < text.length; i += 4) {
    let id = 0;
    for (let j = i; j < Math.min(text.length, i + 4); j++) id = (id * 31 + text.charCodeAt(j)) % 100_000;
    ids.push(id);
  }
  return ids;
}

/** What vLLM adds to an answer or chunk when asked: `choice` gets the text's ids and logprobs, `top` the prompt's ids. */
type TokenAsk = { ids: boolean; logprobs: boolean; prompt: number[] };

function tokenAsk(body: Record<string, unknown> | null): TokenAsk | null {
  const ids = body?.["return_token_ids"] === true;
  const logprobs = body?.["logprobs"] === true;
  if (!ids && !logprobs) return null;
  const messages = Array.isArray(body?.["messages"]) ? (body["messages"] as Message[]) : [];
  return { ids, logprobs, prompt: tokenIds(messages.map((m) => `<${String(m.role)}>${typeof m.content === "string" ? m.content : ""}`).join("")) };
}

function tokenFields(ask: TokenAsk | null, text: string): Record<string, unknown> {
  if (ask === null) return {};
  const ids = tokenIds(text);
  return {
    ...(ask.ids ? { token_ids: ids } : {}),
    ...(ask.logprobs ? { logprobs: { content: ids.map((id, i) => ({ token: text.slice(i * 4, i * 4 + 4), logprob: -(id % 97) / 64, bytes: [id & 0xff], top_logprobs: [] })) } } : {}),
  };
}

const chunk = (model: string, delta: Record<string, unknown>, finish: string | null = null, ask: TokenAsk | null = null, top: Record<string, unknown> = {}): string =>
  `data: ${JSON.stringify({ id: "chatcmpl-test", object: "chat.completion.chunk", created: 1, model, choices: [{ index: 0, delta, finish_reason: finish, ...tokenFields(ask, typeof delta["content"] === "string" ? delta["content"] : "") }], ...top })}\n\n`;

export async function startModelServer(opts: { latencyMs?: number; host?: string; dripTokens?: number; dripMs?: number } = {}): Promise<ModelServer> {
  const seen: SeenRequest[] = [];
  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const text = await bodyText(req);
    const body = text === "" ? null : (JSON.parse(text) as Record<string, unknown>);
    const path = req.url ?? "";
    const header = (n: string): string | undefined => req.headers[n] as string | undefined;
    seen.push({ method: req.method ?? "", path, authorization: header("authorization"), episode: header("x-episode-uuid"), body });
    if (req.method === "GET" && path.endsWith("/models")) {
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ object: "list", data: SERVED_MODELS.map((id) => ({ id, object: "model" })) }));
      return;
    }
    const model = String(body?.["model"] ?? "");
    if (opts.latencyMs) await new Promise((r) => setTimeout(r, opts.latencyMs));
    if (model === "hang") return;
    if (model === "garbage") {
      res.writeHead(200, { "content-type": "text/html" }).end("<html>502 Bad Gateway</html>");
      return;
    }
    if (!SERVED_MODELS.includes(model)) {
      res.writeHead(404, { "content-type": "application/json" }).end(
        JSON.stringify({ error: { message: `The model \`${model}\` does not exist.`, type: "NotFoundError", param: null, code: 404 } }),
      );
      return;
    }
    const content = `echo: ${lastUserText(body)}`;
    const ask = tokenAsk(body);
    if (body?.["stream"] !== true) {
      const answer = completion(model, content);
      if (ask !== null) {
        const choices = answer["choices"] as Record<string, unknown>[];
        choices[0] = { ...choices[0], ...tokenFields(ask, content) };
        if (ask.ids) answer["prompt_token_ids"] = ask.prompt;
      }
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(answer));
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(chunk(model, { role: "assistant", content: "" }, null, ask, ask?.ids ? { prompt_token_ids: ask.prompt } : {}));
    if (model === "crash") {
      res.write(chunk(model, { content: "echo:" }));
      setTimeout(() => res.socket?.destroy(), 20);
      return;
    }
    if (model === "drip") {
      for (let i = 0; i < (opts.dripTokens ?? 50); i++) {
        res.write(chunk(model, { content: ` t${i}` }, null, ask));
        await new Promise((r) => setTimeout(r, opts.dripMs ?? 1));
      }
    } else {
      for (const word of content.split(/(?= )/)) res.write(chunk(model, { content: word }, null, ask));
    }
    res.write(chunk(model, {}, "stop", ask));
    res.end("data: [DONE]\n\n");
  }

  const server = await serveHttp(handle, opts.host);
  return { url: server.origin, seen, close: server.close };
}
