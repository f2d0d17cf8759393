/**
 * Chat messages as the ledger recorded them (OpenAI's shape, whatever the client sent): each with
 * its role, its text and images, the tools it called with their arguments, and which call a tool
 * result answers. Everything is the client's or the model's text, so it goes in as text nodes
 * only. An image is drawn only from a raster `data:` URL (the page's policy loads nothing from
 * elsewhere); one the ledger holds by reference (`rx-media:sha256:<hex>`, docs/ledger.md "Media")
 * is read from the exchange when its message is drawn.
 */
import type { Result } from "./api";
import type { Dom, DomElement } from "./dom";

/** Reads one medium by its digest: the string the client sent in its place. */
export type MediaLoader = (sha256: string) => Promise<Result<string>>;

export function conversationViewModule(dom: Dom) {
  const { h } = dom;
  const ROLES = ["system", "user", "assistant", "tool"];
  // Raster only: an SVG is a document, and what a client sent is never run as one.
  const RASTER = /^data:image\/(png|jpe?g|gif|webp|avif|bmp);base64,/;
  const REF = /^rx-media:sha256:([0-9a-f]{64})$/;

  const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
  const str = (v: unknown): string | null => (typeof v === "string" ? v : null);

  /** An image part's URL: OpenAI's `image_url.url`, or `image_url` as a string (the Responses API's `input_image`). */
  function imageUrl(p: Record<string, unknown>): string | null {
    const u = p["image_url"];
    return isRecord(u) ? str(u["url"]) : str(u);
  }

  /** An image: drawn from a data: URL, read by reference, or named with its URL as text. */
  function image(url: string, loadMedia: MediaLoader): DomElement {
    const ref = REF.exec(url)?.[1] ?? null;
    if (ref === null && !RASTER.test(url)) return h("pre", { class: "msg-text msg-media", "data-media-state": "elsewhere" }, `[image] ${url.slice(0, 300)}`);
    const img = h("img", { class: "msg-image", alt: "an image the client sent", src: ref === null ? url : null, hidden: ref !== null });
    const caption = h("figcaption", { class: "muted" }, ref === null ? "" : "reading the image…");
    const figure = h("figure", { class: "msg-media", "data-media": ref ?? "", "data-media-state": ref === null ? "shown" : "reading" }, img, caption);
    if (ref !== null) {
      void loadMedia(ref).then((r) => {
        if (r.ok && RASTER.test(r.value)) {
          img.setAttribute("src", r.value);
          img.hidden = false;
          caption.textContent = "";
          figure.setAttribute("data-media-state", "shown");
        } else {
          caption.textContent = r.ok ? `The image ${ref.slice(0, 12)}… is not a picture this page draws.` : `The image ${ref.slice(0, 12)}… could not be read (${r.problem.status} ${r.problem.error}): ${r.problem.detail}`;
          figure.setAttribute("data-media-state", "missing");
        }
      });
    }
    return figure;
  }

  /** Text, or an array of content parts: text and images shown in order, other parts named. */
  function content(c: unknown, loadMedia: MediaLoader): DomElement[] {
    if (c === null || c === undefined || c === "") return [];
    if (!Array.isArray(c)) return [h("pre", { class: "msg-text" }, typeof c === "string" ? c : JSON.stringify(c))];
    const out: DomElement[] = [];
    let text: string[] = [];
    const flush = (): void => {
      const joined = text.join("\n");
      if (joined !== "") out.push(h("pre", { class: "msg-text" }, joined));
      text = [];
    };
    for (const p of c) {
      const url = isRecord(p) ? imageUrl(p) : null;
      if (url !== null) {
        flush();
        out.push(image(url, loadMedia));
      } else text.push(isRecord(p) && typeof p["text"] === "string" ? p["text"] : isRecord(p) && typeof p["type"] === "string" ? `[${p["type"]}]` : JSON.stringify(p));
    }
    flush();
    return out;
  }

  /**
   * JSON text indented as JSON.stringify(value, null, 2) indents, its tokens as written: parsed
   * and written again, an integer past 2^53 (an order or file id) would be shown rounded.
   */
  function indentJson(text: string): string {
    let out = "";
    let depth = 0;
    const line = (): string => "\n" + "  ".repeat(depth);
    for (let i = 0; i < text.length; i++) {
      const c = text[i] as string;
      if (c === '"') {
        let j = i + 1;
        while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
        out += text.slice(i, j + 1);
        i = j;
      } else if (c === "{" || c === "[") {
        let j = i + 1;
        while (j < text.length && " \t\n\r".includes(text[j] as string)) j++;
        if (text[j] === (c === "{" ? "}" : "]")) {
          out += c + (text[j] as string);
          i = j;
        } else {
          depth++;
          out += c + line();
        }
      } else if (c === "}" || c === "]") {
        depth--;
        out += line() + c;
      } else if (c === ",") out += "," + line();
      else if (c === ":") out += ": ";
      else if (!" \t\n\r".includes(c)) out += c;
    }
    return out;
  }

  /** A tool's arguments arrive as a JSON string: shown indented when they parse, as sent otherwise. */
  function prettyArguments(args: unknown): string {
    if (typeof args !== "string") return JSON.stringify(args, null, 2) ?? "";
    try {
      JSON.parse(args);
    } catch {
      return args;
    }
    return indentJson(args);
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
  function message(m: unknown, index: number, loadMedia: MediaLoader, answer = false): DomElement {
    if (!isRecord(m)) return h("div", { class: "msg role-other", "data-index": index }, h("pre", { class: "msg-text" }, JSON.stringify(m)));
    const role = str(m["role"]) ?? "unknown";
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
      ...content(m["content"], loadMedia),
      ...calls.map(toolCall),
    );
  }

  /** The messages a call was given, then its answer (if it had one); `loadMedia` reads the images they name. */
  function render(messages: readonly unknown[], answer: unknown, loadMedia: MediaLoader): DomElement {
    return h(
      "div",
      { class: "conversation", id: "episode-messages", "data-messages": messages.length, "data-answer": answer !== null && answer !== undefined },
      ...messages.map((m, i) => message(m, i, loadMedia)),
      answer === null || answer === undefined ? null : message(answer, messages.length, loadMedia, true),
    );
  }

  return { render };
}
export type ConversationView = ReturnType<typeof conversationViewModule>;
