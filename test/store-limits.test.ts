/**
 * Sizes are bytes of UTF-8, and every value a client sizes fits what the stores hold once the
 * exchange has stored it (D1 and Durable Object storage: 2,000,000 bytes per row; Miniflare
 * enforces neither, so these check that the exchange refuses up front what would fail deployed).
 */
import { describe, expect, it } from "vitest";
import { createEngine, raw } from "./support/harness";

describe("text limits count bytes of UTF-8", () => {
  it("refuses a training YAML of 400,000 three-byte characters, 413 naming the limit, and changes nothing", async () => {
    const e = await createEngine("limits");
    const res = await raw(`/e/${e.name}/sync_train_config`, { token: e.tokens.operator, body: JSON.stringify({ yaml_as_string: "東".repeat(400_000) }) });
    expect(res.status).toBe(413);
    expect(res.json).toEqual({ error: "payload_too_large", detail: "yaml_as_string: is 1,200,000 bytes of UTF-8; the limit is 1,000,000 bytes" });
    await expect(e.as("operator").startEngine()).rejects.toMatchObject({ status: 400, code: "no_config" });
    // A million bytes of ASCII is the most it takes.
    expect(await e.as("operator").syncTrainConfig("x".repeat(1_000_000))).toEqual({ success: true });
  });

  it("refuses a status detail over 64 KiB of UTF-8", async () => {
    const e = await createEngine("limits");
    const res = await raw(`/e/${e.name}/update_engine_status`, {
      token: e.tokens.trainer,
      body: JSON.stringify({ engine_status: "ENGINE.BOOTING", engine_status_detail: "東".repeat(30_000) }),
    });
    expect(res.status).toBe(413);
    expect(res.json).toEqual({ error: "payload_too_large", detail: "engine_status_detail: is 90,000 bytes of UTF-8; the limit is 65,536 bytes" });
    expect(await e.as("viewer").getEngineStatus()).toMatchObject({ engine_status: "ENGINE.OFFLINE", engine_status_detail: null });
  });
});
