/**
 * A whole completion as a streaming client reads it. Its own file (no workerd globals) because
 * both the Worker (sse.ts) and the agent's gateway answer streaming clients from a whole completion.
 */

/**
 * A chat.completion as the chunks OpenAI would have streamed (a text_completion passed through):
 * one chunk with each choice's message as its delta, its logprobs and finish reason, then, only
 * when the client asked for it (`stream_options.include_usage`), the usage in a chunk of its own
 * with no choices, as OpenAI sends it. Each tool call gets its `index`, which clients merge by.
 */
export function completionToChunks(completion: Record<string, unknown>, includeUsage: boolean): Record<string, unknown>[] {
  if (completion["object"] !== "chat.completion") return [completion];
  const choices = Array.isArray(completion["choices"]) ? (completion["choices"] as Record<string, unknown>[]) : [];
  const head = { id: completion["id"], object: "chat.completion.chunk", created: completion["created"], model: completion["model"] };
  const chunk = {
    ...head,
    choices: choices.map((ch) => ({
      index: ch["index"] ?? 0,
      delta: withToolCallIndexes(ch["message"]),
      ...(ch["logprobs"] !== undefined ? { logprobs: ch["logprobs"] } : {}),
      finish_reason: ch["finish_reason"] ?? "stop",
    })),
  };
  return includeUsage && completion["usage"] !== undefined ? [chunk, { ...head, choices: [], usage: completion["usage"] }] : [chunk];
}

function withToolCallIndexes(message: unknown): unknown {
  if (typeof message !== "object" || message === null) return {};
  const calls = (message as { tool_calls?: unknown }).tool_calls;
  if (!Array.isArray(calls)) return message;
  // The call's place in the list, over any index the server gave: SGLang's whole answers give
  // each call its tool's place in `tools`, so two calls of one tool would both say 0 and a
  // client's stream assembly would merge them into one.
  return { ...message, tool_calls: calls.map((c: unknown, i) => (typeof c === "object" && c !== null ? { ...c, index: i } : c)) };
}

/** Whether a request asked for usage in its stream (OpenAI's `stream_options.include_usage`). */
export function asksStreamUsage(request: Record<string, unknown> | null): boolean {
  const options = request?.["stream_options"];
  return typeof options === "object" && options !== null && (options as { include_usage?: unknown }).include_usage === true;
}
