/**
 * Text the gateway cuts to a bound before it is recorded: an answer cut to the record cap, an
 * upstream's error cut for the record. A cut never leaves half a surrogate pair: a lone half has
 * no UTF-8 form, and Python's `.encode("utf-8")` and Hugging Face tokenizers refuse what the
 * export would then give them.
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { headOf } from "../../../src/protocol/limits";
import { bodyText } from "../support/http-server";
import { recordingGatewayOnModel } from "./recording-gateway";

/** Shown as escapes: the test's report cannot carry a lone surrogate. */
const shown = (s: string): string => JSON.stringify(s).replace(/[\ud800-\udfff]/g, (c) => `\\u${c.charCodeAt(0).toString(16)}`);
const wellFormed = (s: string): boolean => !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s);

async function answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const asked = JSON.parse(await bodyText(req)) as { model?: string };
  const lead = Number(/^emoji-(\d+)$/.exec(asked.model ?? "")?.[1] ?? 0);
  if ((asked.model ?? "").startsWith("broken-")) {
    // Not an OpenAI error: the gateway records the start of the text, whose cut falls inside an emoji's pair.
    res.writeHead(500, { "content-type": "text/plain" }).end("a".repeat(Number(asked.model!.slice(7))) + "😀".repeat(400));
    return;
  }
  // A long answer of emoji (4 bytes of UTF-8, two UTF-16 units each) behind `lead` ASCII characters: over the record cap.
  const content = "a".repeat(lead) + "😀".repeat(1_200_000);
  res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: "x", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "length" }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }));
}

const recording = recordingGatewayOnModel("record-cut-secret", answer);

const call = (modelName: string) => recording.call(`ep-${randomUUID()}`, { model: modelName, messages: [{ role: "user", content: "talk" }] }, "messages");

describe("text cut before it is recorded", () => {
  it("cuts a long answer of emoji at a character boundary, never leaving half a surrogate pair in the record", async () => {
    const cut: string[] = [];
    for (const lead of [0, 1, 2, 3]) {
      const env = call(`emoji-${lead}`);
      expect((await recording.post(env)).status).toBe(200);
      const rec = await recording.recordOf(env);
      expect(rec.truncated).toBe(true);
      const content = String(rec.body.answer?.["content"]);
      cut.push(`lead ${lead}: ends ${shown(content.slice(-2))} wellFormed=${wellFormed(content)}`);
    }
    expect(cut.filter((c) => c.endsWith("wellFormed=false")), cut.join("; ")).toEqual([]);
  });

  it("records an upstream's long error text cut at a character boundary", async () => {
    const errors: string[] = [];
    for (const lead of [0, 1]) {
      const env = call(`broken-${lead}`);
      expect((await recording.post(env)).status).toBe(500);
      const rec = await recording.recordOf(env);
      errors.push(rec.error ?? "");
    }
    for (const e of errors) expect(wellFormed(e), shown(e.slice(-4))).toBe(true);
    expect(errors.every((e) => e.includes("😀"))).toBe(true);
  });

  it("headOf: a cut that would split a pair keeps the whole character out, and leaves a lone surrogate the text held", () => {
    expect(headOf("ab😀c", 3)).toBe("ab");
    expect(headOf("ab😀c", 4)).toBe("ab😀");
    expect(headOf("ab😀c", 2)).toBe("ab");
    expect(headOf("ab\ud800c", 3)).toBe("ab\ud800");
    expect(headOf("😀", 1)).toBe("");
    expect(headOf("abc", 10)).toBe("abc");
    expect(headOf(null, 3)).toBeNull();
  });
});
