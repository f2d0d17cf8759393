/**
 * The gateway's largest call record (local-agent's RECORD_BODY_CAP_BYTES) fits a batch of its
 * own under the exchange's request limit, with fields written as large as they may be: the
 * Worker, in workerd with real D1 and R2, takes it and reads it back whole.
 */
import { describe, expect, it } from "vitest";
import { LedgerClient } from "../src/client";
import { MAX_REQUEST_BODY_BYTES, utf8Bytes } from "../src/protocol/limits";
import { RECORD_BODY_CAP_BYTES } from "../local-agent/src/ledger/recorder";
import { batchOf, callRecord, postCalls } from "./support/ledger";
import { claimKeyFields, createEngine, ORIGIN, rollingWith, workerFetch } from "./support/harness";

describe("ledger: the largest record", () => {
  it("takes a batch of one record at the cap, its error and finish reason at their longest, and reads it back whole", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const claim = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 600 });
    const k = await claimKeyFields(claim.openai_api_key);
    const c = { episode: k.episode_uuid, fence: k.fence, client: "c1" };
    const shell = callRecord(c, { error: "\u0001".repeat(2000), finish_reason: "\u0001".repeat(64), body: { messages: [{ role: "user", content: "" }] } });
    const room = RECORD_BODY_CAP_BYTES - utf8Bytes(JSON.stringify(shell.body));
    const record = { ...shell, body: { ...shell.body, messages: [{ role: "user", content: "x".repeat(room) }] } };
    expect(utf8Bytes(JSON.stringify(record.body))).toBe(RECORD_BODY_CAP_BYTES);
    const batch = JSON.stringify(batchOf([record]));
    expect(utf8Bytes(batch)).toBeLessThanOrEqual(MAX_REQUEST_BODY_BYTES);
    const res = await postCalls(e, JSON.parse(batch));
    expect(res.status, JSON.stringify(res.json).slice(0, 300)).toBe(200);
    const t = await new LedgerClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens.viewer, fetch: workerFetch }).trajectory(c.episode);
    expect((t.calls[0]?.messages[0] as { content: string }).content.length).toBe(room);
  });
});
