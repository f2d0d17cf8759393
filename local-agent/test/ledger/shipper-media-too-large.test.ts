/**
 * The agent takes media of up to 12 MB out of its records; an exchange older than it (a gradual
 * deployment's previous version, or an agent upgraded before its Worker) refuses such an upload
 * 413 (its 4 MiB body limit). The shipper then sends the calls naming it with a marker in its
 * place (rx-media-missing:sha256:<hex>), and every other call of the batch as it was: nothing else
 * is dropped (docs/operations.md: an agent a version ahead keeps its calls and their tokens).
 */
import { createHash, randomUUID } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { ExchangeError } from "../../../src/client";
import { mediaRef, missingMediaRef } from "../../../src/ledger/media-refs";
import type { CallBatch, CallRecord } from "../../../src/protocol/ledger";
import { CallShipper } from "../../src/ledger/shipper";
import { ManualClock } from "../support/manual-clock";
import { MemoryLogger } from "../support/logger";
import { waitUntil } from "../support/wait";

let shipper: CallShipper | undefined;
afterEach(async () => {
  await shipper?.close(0);
});

function record(now: number): CallRecord {
  return {
    call_id: randomUUID(), capture: "messages", client_uuid: "c", task_id: "t", weight_version: null, run: 0, admitted_at: now,
    episode_uuid: "ep", fence: 1, endpoint: "/v1/chat/completions", model: "tiny", stream: false, started_at: now, first_byte_at: now,
    done_at: now, status: 200, error: null, finish_reason: "stop", usage: null, truncated: false,
    body: { params: { model: "tiny" }, tools: null, tools_from_prefix: false, prefix: null, messages: [], answer: { role: "assistant", content: "ok" }, tokens: null },
  };
}

describe("shipper against an exchange with the old 4 MiB media body limit", () => {
  it("sends the calls naming a medium an older exchange refused as too large with a marker in its place, and the rest of the batch as it was", async () => {
    const clock = new ManualClock();
    const logger = new MemoryLogger();
    const sent: CallBatch[] = [];
    const data = `data:image/png;base64,${"QUJD".repeat(1_250_000)}`; // 5 MB: taken out by this agent (MAX_MEDIA_BYTES 12 MB), over an older Worker's 4 MiB
    const sha = createHash("sha256").update(data).digest("hex");
    shipper = new CallShipper({
      post: async (b) => (sent.push(b), { recorded: b.calls.length, duplicates: 0 }),
      putMedia: () => Promise.reject(new ExchangeError(413, "payload_too_large", "The request body exceeds 4194304 bytes.")),
      clock,
      logger,
      backoff: { initialMs: 200, maxMs: 2000, random: () => 0 },
    });
    const naming = record(clock.now());
    naming.body.messages = [{ role: "user", content: [{ type: "text", text: "what is on the screen?" }, { type: "image_url", image_url: { url: mediaRef(sha) } }] }];
    const other = record(clock.now());
    other.body.messages = [{ role: "user", content: "hi" }];
    shipper.enqueue(naming, 100, new Map([[sha, data]]));
    shipper.enqueue(other, 100);
    await clock.advance(1000);
    await waitUntil(() => shipper!.report().sent_calls + shipper!.report().refused_calls >= 2, "the batch sent or refused");
    expect(shipper.report()).toMatchObject({ refused_calls: 0 });
    const calls = sent.flatMap((b) => b.calls);
    expect(calls.map((c) => [c.call_id, c.truncated, c.body.messages, c.body.answer])).toEqual([
      [naming.call_id, false, [{ role: "user", content: [{ type: "text", text: "what is on the screen?" }, { type: "image_url", image_url: { url: missingMediaRef(sha) } }] }], { role: "assistant", content: "ok" }],
      [other.call_id, false, [{ role: "user", content: "hi" }], { role: "assistant", content: "ok" }],
    ]);
    expect(logger.lines.some((l) => l.includes("refused a medium"))).toBe(true);
  });
});
