/**
 * The ledger's splice rules for messages (src/ledger/splice.ts): which messages make the same
 * conversation, and what a call stores of its messages so that a reader, rebuilding it from the
 * call it continues, gives back exactly the form this call sent.
 */
import { describe, expect, it } from "vitest";
import { continuation, extendsMessages, messageDelta, messageKey, rebuild } from "../src/ledger/splice";

const text = (t: string) => [{ type: "text", text: t }];
const shot = { type: "image_url", image_url: { url: "data:image/png;base64,AAAA", detail: "high" } };

/** What a reader gives back for `messages` stored against `base` (the previous call's continuation). */
function roundTrip(messages: unknown[], base: unknown[]): { stored: ReturnType<typeof messageDelta>; rebuilt: unknown[] | null } {
  const stored = messageDelta(messages, base);
  return { stored, rebuilt: rebuild(stored.prefixCount === null ? null : { base, count: stored.prefixCount }, stored.rest) };
}

describe("messageKey", () => {
  it("makes a string and a list of one text part holding it the same message", () => {
    expect(messageKey({ role: "assistant", content: "click" })).toBe(messageKey({ role: "assistant", content: text("click") }));
    expect(messageKey({ role: "assistant", content: "click" })).toBe(messageKey({ content: [{ text: "click", type: "text" }], role: "assistant" }));
  });

  it("compares content parts whatever the order of their keys, nested keys too", () => {
    const a = { role: "user", content: [{ type: "text", text: "look" }, shot] };
    const b = { role: "user", content: [{ text: "look", type: "text" }, { image_url: { detail: "high", url: shot.image_url.url }, type: "image_url" }] };
    expect(messageKey(a)).toBe(messageKey(b));
  });

  it("tells apart what a model may read differently: several text parts and their concatenation, a part with another key, another text", () => {
    const key = messageKey({ role: "user", content: "ab" });
    // Servers join text parts their own way (vLLM with a newline): not the concatenation.
    expect(messageKey({ role: "user", content: [...text("a"), ...text("b")] })).not.toBe(key);
    expect(messageKey({ role: "user", content: [{ type: "text", text: "ab", cache_control: { type: "ephemeral" } }] })).not.toBe(key);
    expect(messageKey({ role: "user", content: text("ab ") })).not.toBe(key);
    expect(messageKey({ role: "user", content: [{ type: "input_text", text: "ab" }] })).not.toBe(key);
    expect(messageKey({ role: "system", content: text("ab") })).not.toBe(key);
  });
});

describe("messageDelta and rebuild", () => {
  const first = [{ role: "system", content: text("desk") }, { role: "user", content: [...text("look"), shot] }];
  const answer = { role: "assistant", content: "click" };

  it("stores the answer sent back as a text part in that form, after a prefix that ends before it, and rebuilds this call's form", () => {
    const base = continuation(first, answer);
    const messages = [...first, { role: "assistant", content: text("click") }, { role: "user", content: text("next") }];
    expect(extendsMessages(messages, base)).toBe(true);
    const { stored, rebuilt } = roundTrip(messages, base);
    expect(stored).toEqual({ prefixCount: 2, rest: messages.slice(2) });
    expect(rebuilt).toEqual(messages);
    expect(JSON.stringify(rebuilt)).toBe(JSON.stringify(messages));
  });

  it("rebuilds a message sent as a string after a call that sent it as a text part, as a string", () => {
    const base = continuation([{ role: "system", content: "desk" }, { role: "user", content: text("look") }], answer);
    const messages = [{ role: "system", content: "desk" }, { role: "user", content: "look" }, answer, { role: "user", content: "next" }];
    expect(extendsMessages(messages, base)).toBe(true);
    const { stored, rebuilt } = roundTrip(messages, base);
    expect(stored).toEqual({ prefixCount: 1, rest: messages.slice(1) });
    expect(JSON.stringify(rebuilt)).toBe(JSON.stringify(messages));
  });

  it("refers to the whole previous conversation when every message is sent in the form stored, and to none when the first is not", () => {
    const base = continuation(first, answer);
    const same = [...first, answer, { role: "user", content: "next" }];
    expect(messageDelta(same, base)).toEqual({ prefixCount: 3, rest: [same[3]] });
    const changedFirst = [{ role: "system", content: "desk" }, ...same.slice(1)];
    // The same conversation, but nothing of it in the form stored: stored whole.
    expect(extendsMessages(changedFirst, base)).toBe(true);
    expect(messageDelta(changedFirst, base)).toEqual({ prefixCount: null, rest: changedFirst });
  });

  it("stores a rewritten history whole", () => {
    const base = continuation(first, answer);
    const messages = [...first, { role: "assistant", content: "type" }, { role: "user", content: "next" }];
    expect(messageDelta(messages, base)).toEqual({ prefixCount: null, rest: messages });
  });
});
