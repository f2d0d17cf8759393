/**
 * Vision-language and non-ASCII payloads in the rollout buffer and the Atropos API: taken
 * exactly within their documented byte limits (bytes of UTF-8, not UTF-16 units), refused beyond
 * with a 413 that names the limit. A lone surrogate in a buffer row: test/buffer.test.ts.
 */
import { describe, expect, it } from "vitest";
import { atropos, group, running } from "./support/atropos";
import { createEngine, raw } from "./support/harness";

const b64 = (n: number): string => {
  const bytes = new Uint8Array(n);
  for (let i = 0; i < n; i++) bytes[i] = (i * 2654435761) >>> 24;
  let s = "";
  for (let i = 0; i < n; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
};
const UNI = "証明せよ: 𝔸∀x 😀𠀋 e\u0301 👩‍👩‍👧 lone:\ud800 end";
/** Python's json.dumps default: ASCII only. */
const ensureAscii = (v: unknown): string => JSON.stringify(v).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);

describe("the rollout buffer with images and Unicode", () => {
  it("takes a 1 MB vision row within max_message_bytes and refuses rows over it counted in bytes of UTF-8, with a 413 naming it", async () => {
    const e = await createEngine("rvb1");
    await e.as("trainer").startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
    expect((await raw(`/e/${e.name}/buffer/config`, { token: e.tokens.operator, body: JSON.stringify({ max_message_bytes: 1_500_000 }) })).status).toBe(200);
    const ok = "証明 𝔸😀𠀋 e\u0301";
    const messages = [{ role: "user", content: [{ type: "text", text: ok }, { type: "image_url", image_url: { url: `data:image/png;base64,${b64(750_000)}` } }] }];
    const row = { session_id: "s1", group_id: "g1", step_index: 0, messages, response: ok, reward: 1, is_session_completed: true };
    expect((await raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: ensureAscii({ steps: [row] }) })).status).toBe(200);
    const item = (await e.as("trainer").getRolloutData()).data.data[0] as unknown as { messages: unknown };
    expect(item.messages).toEqual([...messages, { role: "assistant", content: ok }]);
    // A 1.6 MB screenshot is over this engine's 1,500,000.
    const over = await raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify({ steps: [{ ...row, session_id: "s9", group_id: "g9", messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: `data:image/png;base64,${b64(1_200_000)}` } }] }] }] }) });
    expect(over.status).toBe(413);
    expect(String(over.json?.["detail"])).toContain("max_message_bytes");

    // 180,000 CJK characters: 540,000 bytes of UTF-8 (but 180,000 UTF-16 units), over the default 524,288.
    const e2 = await createEngine("rvb2");
    await e2.as("trainer").startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
    const cjk = { ...row, session_id: "s2", group_id: "g2", messages: [{ role: "user", content: "漢".repeat(180_000) }], response: "" };
    const refused = await raw(`/e/${e2.name}/steps`, { token: e2.tokens.client, body: JSON.stringify({ steps: [cjk] }) });
    expect(refused.status).toBe(413);
    expect(String(refused.json?.["detail"])).toContain("max_message_bytes");
    // 135,000 emoji: 540,000 bytes, 270,000 units.
    const emoji = { ...cjk, session_id: "s3", group_id: "g3", messages: [{ role: "user", content: "😀".repeat(135_000) }] };
    expect((await raw(`/e/${e2.name}/steps`, { token: e2.tokens.client, body: JSON.stringify({ steps: [emoji] }) })).status).toBe(413);
  });
});

describe("Atropos with images and Unicode", () => {
  it("gives back a group's images and multimodal messages exactly, also a group of more UTF-8 than a row holds", async () => {
    const e = await createEngine("rva");
    await running(e);
    const images = [`data:image/png;base64,${b64(600_000)}`, null];
    const messages = [[{ role: "user", content: [{ type: "text", text: UNI }, { type: "image_url", image_url: { url: images[0] } }] }, { role: "assistant", content: UNI }], [{ role: "user", content: UNI }]];
    const g = group(1, 2, 0, { images, messages });
    const sent = await atropos(e, "client", "POST", "/scored_data", undefined, { rawBody: ensureAscii(g), headers: { "content-type": "application/json" } });
    expect(sent.json).toEqual({ status: "received" });
    // A second group fills the batch of 4 sequences.
    expect((await atropos(e, "client", "POST", "/scored_data", group(2, 2))).status).toBe(200);
    const batch = (await atropos(e, "trainer", "GET", "/batch")).json.batch as Record<string, unknown>[];
    const got = batch.find((x) => (x["tokens"] as number[][])[0]![0] === 1)!;
    expect(JSON.stringify(got["images"]) === JSON.stringify(images)).toBe(true);
    expect(JSON.stringify(got["messages"]) === JSON.stringify(messages)).toBe(true);

    // 650,000 CJK characters: 1,950,000 bytes of UTF-8, more than a row holds, in 650,000 units:
    // stored in pieces of at most 1,800,000 bytes (atropos-store.ts PIECE_UNITS), and given back whole.
    const bigMessages = [[{ role: "user", content: "漢".repeat(650_000) }], [{ role: "user", content: "y" }]];
    expect((await atropos(e, "client", "POST", "/scored_data", group(3, 2, 0, { messages: bigMessages }))).json).toEqual({ status: "received" });
    const latest = (await atropos(e, "viewer", "GET", "/latest_example")).json as Record<string, unknown>;
    expect(JSON.stringify(latest["messages"]) === JSON.stringify(bigMessages)).toBe(true);
  });
});
