/**
 * Sizes are bytes of UTF-8, and every value a client sizes fits what the stores hold once the
 * exchange has stored it (D1 and Durable Object storage: 2,000,000 bytes per row; Miniflare
 * enforces neither, so these check that the exchange refuses up front what would fail deployed).
 */
import { describe, expect, it } from "vitest";
import { createEngine, endBody, engineStats, raw, rollingWith } from "./support/harness";

const STORES = "the limit is 1,900,000 bytes (D1 and Durable Object storage hold 2,000,000 bytes per row)";

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

describe("values the engine stores fit a stored row", () => {
  it("refuses a workflow output whose stored form passes the limit, keeping the claim; a smaller one ends it", async () => {
    const e = await createEngine("limits");
    await rollingWith(e, 1);
    const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const body = endBody("c1", c.episode_uuid, 1);
    // 600,000 quotes: 1.2 MB of JSON as sent, 2.4 MB once escaped in the trajectory's outbox record.
    body.workflow_output = { ...body.workflow_output, log_metrics: { quotes: '"'.repeat(600_000) } };
    const res = await raw(`/e/${e.name}/end_episode`, { token: e.tokens.client, body: JSON.stringify(body) });
    expect(res.status).toBe(413);
    expect(res.json?.["error"]).toBe("payload_too_large");
    expect(res.json?.["detail"]).toMatch(/^workflow_output is 2,400,\d{3} bytes as stored; /);
    expect(res.json?.["detail"]).toContain(STORES);
    expect(await e.as("client").canContinueEpisode({ client_uuid: "c1", episode_uuid: c.episode_uuid })).toEqual({ can_continue: true });
    expect(await engineStats(e)).toMatchObject({ claimed: 1, outbox: 0, pending_commands: 0 });
    expect(await e.as("client").endEpisode(endBody("c1", c.episode_uuid, 1))).toEqual({ success: true });
  });

  it("refuses a training YAML that passes the limit once stored as a JSON string", async () => {
    const e = await createEngine("limits");
    // A million newlines are a million bytes of YAML, and two million escaped.
    const res = await raw(`/e/${e.name}/sync_train_config`, { token: e.tokens.operator, body: JSON.stringify({ yaml_as_string: "\n".repeat(1_000_000) }) });
    expect(res.status).toBe(413);
    expect(res.json).toEqual({ error: "payload_too_large", detail: `yaml_as_string is 2,000,002 bytes as stored; ${STORES}` });
    await expect(e.as("operator").startEngine()).rejects.toMatchObject({ status: 400, code: "no_config" });
  });

  it("refuses pool information too large to store, and keeps the last that fit", async () => {
    const e = await createEngine("limits");
    const trainer = e.as("trainer");
    expect(await trainer.updatePoolInfo({ completed_episodes: 3 })).toMatchObject({ success: true });
    const details = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`task-${i}`, Array.from({ length: 1000 }, (_, j) => `episode-${i}-${j}-${"x".repeat(90)}`)]));
    const res = await raw(`/e/${e.name}/update_current_batch_rollout_pool_information`, { token: e.tokens.trainer, body: JSON.stringify({ completed_tasks_details: details }) });
    expect(res.status).toBe(413);
    expect(res.json?.["error"]).toBe("payload_too_large");
    expect(res.json?.["detail"]).toMatch(/^the pool information is 2,\d{3},\d{3} bytes as stored; /);
    expect(res.json?.["detail"]).toContain(STORES);
    expect(await e.as("viewer").getPoolInfo()).toMatchObject({ completed_episodes: 3, completed_tasks_details: {} });
  });
});
