/**
 * Chat messages as the ledger recorded them (OpenAI's shape, whatever the client sent): each with
 * its role, its text, the tools it called with their arguments, and which call a tool result
 * answers. Everything is the client's or the model's text, so it goes in as text nodes only.
 */
import type { Dom, DomElement } from "./dom";

export function conversationViewModule(dom: Dom) {
  const { h } = dom;
  const ROLES = ["system", "user", "assistant", "tool"];

  const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
  const str = (v: unknown): string | null => (typeof v === "string" ? v : null);

  /** Text, or an array of content parts (text, images, audio): text shown, other parts named. */
  function contentText(c: unknown): string {
    if (c === null || c === undefined) return "";
    if (typeof c === "string") return c;
    if (Array.isArray(c)) {
      return c
        .map((p) => (isRecord(p) && typeof p["text"] === "string" ? p["text"] : isRecord(p) && typeof p["type"] === "string" ? `[${p["type"]}]` : JSON.stringify(p)))
        .join("\n");
    }
    return JSON.stringify(c);
  }

  /** A tool's arguments arrive as a JSON string: shown indented when they parse, as sent otherwise. */
  function prettyArguments(args: unknown): string {
    if (typeof args !== "string") return JSON.stringify(args, null, 2) ?? "";
    try {
      return JSON.stringify(JSON.parse(args), null, 2);
    } catch {
      return args;
    }
  }

  function toolCall(tc: unknown): DomElement {
    const fn = isRecord(tc) && isRecord(tc["function"]) ? tc["function"] : {};
    const name = str(fn["name"]) ?? "(unnamed tool)";
    const id = isRecord(tc) ? str(tc["id"]) : null;
    return h(
      "div",
      { class: "tool-call", "data-tool": name, "data-tool-call-id": id ?? "" },
      h("div", { class: "tool-call-head" }, "calls ", h("strong", { class: "mono" }, name), id === null ? null : h("span", { class: "muted mono" }, ` ${id}`)),
      h("pre", { class: "tool-args" }, prettyArguments(fn["arguments"])),
    );
  }

  /** One message; `answer` marks the call's own answer, as opposed to what the model was given. */
  function message(m: unknown, index: number, answer = false): DomElement {
    if (!isRecord(m)) return h("div", { class: "msg role-other", "data-index": index }, h("pre", { class: "msg-text" }, JSON.stringify(m)));
    const role = str(m["role"]) ?? "unknown";
    const text = contentText(m["content"]);
    const calls = Array.isArray(m["tool_calls"]) ? m["tool_calls"] : [];
    const answers = str(m["tool_call_id"]);
    const name = str(m["name"]);
    const reasoning = str(m["reasoning_content"]) ?? str(m["reasoning"]);
    return h(
      "div",
      { class: `msg role-${ROLES.includes(role) ? role : "other"}${answer ? " answer" : ""}`, "data-role": role, "data-index": index, "data-answer": answer },
      h(
        "div",
        { class: "msg-head" },
        h("span", { class: "msg-role" }, role),
        name === null ? null : h("span", { class: "mono" }, name),
        answers === null ? null : h("span", { class: "muted" }, "result of ", h("span", { class: "mono" }, answers)),
        answer ? h("span", { class: "pill good" }, "answer") : null,
      ),
      reasoning === null ? null : h("details", { class: "reasoning" }, h("summary", {}, "reasoning"), h("pre", { class: "msg-text" }, reasoning)),
      text === "" ? null : h("pre", { class: "msg-text" }, text),
      ...calls.map(toolCall),
    );
  }

  /** The messages a call was given, then its answer (if it had one). */
  function render(messages: readonly unknown[], answer: unknown): DomElement {
    return h(
      "div",
      { class: "conversation", id: "episode-messages", "data-messages": messages.length, "data-answer": answer !== null && answer !== undefined },
      ...messages.map((m, i) => message(m, i)),
      answer === null || answer === undefined ? null : message(answer, messages.length, true),
    );
  }

  return { render };
}
export type ConversationView = ReturnType<typeof conversationViewModule>;
