/**
 * The ledger's splice rules for messages (src/ledger/splice.ts): which messages make the same
 * conversation, and what a call stores of its messages so that a reader, rebuilding it from the
 * call it continues (as chains, src/ledger/chain.ts), gives back exactly the form this call sent.
 */
import { describe, expect, it } from "vitest";
import { chainBeginsWith, chained, chainOf, itemsOf, textOf, type Chain } from "../src/ledger/chain";
import { continuation, messageDelta, messageKey, messageKeys, sameMessage, sameToken } from "../src/ledger/splice";

const extendsMessages = (messages: unknown[], base: unknown[]): boolean => chainBeginsWith(chainOf(messages), chainOf(base), sameMessage);

const text = (t: string) => [{ type: "text", text: t }];
const shot = { type: "image_url", image_url: { url: "data:image/png;base64,AAAA", detail: "high" } };

/** What a reader gives back for `messages` stored against `base` (the previous call's continuation). */
function roundTrip(messages: unknown[], base: unknown[]): { stored: ReturnType<typeof messageDelta>; rebuilt: unknown[] | null } {
  const stored = messageDelta(messages, base);
  const rebuilt = stored.prefixCount === null ? chainOf(stored.rest) : chained(chainOf(base), stored.prefixCount, stored.rest);
  return { stored, rebuilt: rebuilt === null ? null : itemsOf(rebuilt) };
}

describe("messageKey", () => {
  it("makes a string and a list of one text part holding it the same message", () => {
    expect(messageKey({ role: "assistant", content: "click" })).toBe(messageKey({ role: "assistant", content: text("click") }));
    expect(messageKey({ role: "assistant", content: "click" })).toBe(messageKey({ content: [{ text: "click", type: "text" }], role: "assistant" }));
  });

  it("gives a message's whole form: a server's extra fields, another reasoning, null content and none are other forms of the same message", () => {
    const sent = { role: "assistant", content: "4" };
    for (const other of [{ ...sent, reasoning_content: "2+2" }, { ...sent, refusal: null }, { role: "assistant", content: "4", reasoning_content: "think" }]) {
      expect(messageKeys(other).key).toBe(messageKeys(sent).key);
      expect(messageKeys(other).form).not.toBe(messageKeys(sent).form);
    }
    expect(messageKeys({ role: "assistant", content: null, tool_calls: [] }).form).not.toBe(messageKeys({ role: "assistant", content: "" }).form);
    expect(messageKeys({ role: "user" }).key).toBe(messageKeys({ role: "user", content: "" }).key);
    expect(messageKeys({ role: "user" }).form).not.toBe(messageKeys({ role: "user", content: "" }).form);
    // The same message with its keys in another order is the same form.
    expect(messageKeys({ content: "hi", role: "user", name: "a" }).form).toBe(messageKeys({ role: "user", name: "a", content: "hi" }).form);
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

describe("messageDelta and its rebuild", () => {
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

describe("chains: a claim's calls sharing its history", () => {
  /** `turns` calls, each continuing the one before whole with `added` ids, as a tool loop does. */
  const loop = (turns: number, added: number): Chain<readonly number[]>[] => {
    const calls: Chain<readonly number[]>[] = [chainOf(Array.from({ length: added }, (_, i) => i))];
    for (let t = 1; t < turns; t++) {
      const before = calls[t - 1] as Chain<readonly number[]>;
      calls.push(chained(before, before.length, Array.from({ length: added }, (_, i) => t * added + i)) as Chain<readonly number[]>);
    }
    return calls;
  };

  it("gives back each call's items whole, or its first n, and a text whole", () => {
    const calls = loop(4, 3);
    expect(calls.map((c) => itemsOf(c))).toEqual([[0, 1, 2], [0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]]);
    expect(itemsOf(calls[3] as Chain<readonly number[]>, 7)).toEqual([0, 1, 2, 3, 4, 5, 6]);
    // A call that keeps only part of the one before (a history trimmed), then its own.
    const trimmed = chained(calls[2] as Chain<readonly number[]>, 4, [40, 41]);
    expect(trimmed === null ? null : itemsOf(trimmed)).toEqual([0, 1, 2, 3, 40, 41]);
    const text = chained(chainOf("You are"), 7, " an agent.");
    const next = text && chained(text, 10, "\nuser: hi");
    expect(next && textOf(next)).toBe("You are an\nuser: hi");
  });

  it("refuses a prefix longer than the call it names, and takes a prefix of none as no prefix", () => {
    const base = chainOf([1, 2, 3]);
    expect(chained(base, 4, [9])).toBeNull();
    expect(chained(base, 0, [9])).toEqual({ base: null, head: 0, own: [9], length: 1 });
  });

  it("tells a call made from its base extends it without making either whole, and compares any other item by item", () => {
    const calls = loop(50, 2);
    const last = calls[49] as Chain<readonly number[]>;
    let compared = 0;
    const counting = (a: number, b: number): boolean => {
      compared++;
      return sameToken(a, b);
    };
    expect(chainBeginsWith(last, calls[10] as Chain<readonly number[]>, counting)).toBe(true);
    expect(compared).toBe(0);
    // The same items, made apart from the base: compared, and found to extend it.
    expect(chainBeginsWith(chainOf(itemsOf(last)), calls[10] as Chain<readonly number[]>, counting)).toBe(true);
    expect(compared).toBe(22);
    // Made from the base but keeping less of it (a trimmed history, an answer stored again as the
    // client sent it), then other items: only the items it did not keep are compared.
    compared = 0;
    const rewritten = chained(calls[10] as Chain<readonly number[]>, 21, [99]) as Chain<readonly number[]>;
    expect(chainBeginsWith(rewritten, calls[10] as Chain<readonly number[]>, counting)).toBe(false);
    expect(compared).toBe(1);
    // ... unless its own items happen to be the ones it dropped.
    const same = chained(calls[10] as Chain<readonly number[]>, 21, [21]) as Chain<readonly number[]>;
    expect(chainBeginsWith(same, calls[10] as Chain<readonly number[]>, sameToken)).toBe(true);
    expect(itemsOf(last, 7, 3)).toEqual([3, 4, 5, 6]);
    expect(chainBeginsWith(calls[10] as Chain<readonly number[]>, last, sameToken)).toBe(false);
  });

  it("holds each item once however long the claim, and reads a chain as deep as a claim of 100,000 calls", () => {
    const calls = loop(100_000, 1);
    const last = calls[99_999] as Chain<readonly number[]>;
    // Every call's own items together are the last call's items: nothing is held twice.
    expect(calls.reduce((n, c) => n + c.own.length, 0)).toBe(last.length);
    const items = itemsOf(last);
    expect(items.length).toBe(100_000);
    expect(items[99_999]).toBe(99_999);
    expect(itemsOf(last, 3)).toEqual([0, 1, 2]);
  });
});
