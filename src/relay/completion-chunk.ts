/**
 * A whole completion as a streaming client reads it. Its own file (no workerd globals) because
 * both the Worker (sse.ts) and the agent's gateway answer streaming clients from a whole completion.
 */

/** A chat.completion as one chat.completion.chunk (or a text_completion passed through). */
export function completionToChunk(completion: Record<string, unknown>): Record<string, unknown> {
  if (completion["object"] !== "chat.completion") return completion;
  const choices = Array.isArray(completion["choices"]) ? (completion["choices"] as Record<string, unknown>[]) : [];
  return {
    id: completion["id"],
    object: "chat.completion.chunk",
    created: completion["created"],
    model: completion["model"],
    choices: choices.map((ch) => ({ index: ch["index"] ?? 0, delta: ch["message"] ?? {}, finish_reason: ch["finish_reason"] ?? "stop" })),
    ...(completion["usage"] !== undefined ? { usage: completion["usage"] } : {}),
  };
}
