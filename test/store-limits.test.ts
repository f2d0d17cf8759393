/**
 * Sizes are bytes of UTF-8, and every value a client sizes fits what the stores hold once the
 * exchange has stored it (D1 and Durable Object storage: 2,000,000 bytes per row; Miniflare
 * enforces neither, so these check that the exchange refuses up front what would fail deployed).
 */
import { describe, expect, it } from "vitest";
import { jsonStringBytes, utf8Bytes } from "../src/protocol/limits";
import { createEngine, endBody, engineStats, raw, rollingWith, type TestEngine } from "./support/harness";
import { GSM8K_FIELDS, refusal, runsAs, sampleCatalog } from "./support/runs";

const STORES = "the limit is 1,900,000 bytes (D1 and Durable Object storage hold 2,000,000 bytes per row)";

describe("text limits count bytes of UTF-8", () => {
  it("counts as TextEncoder does, without encoding", () => {
    const texts = ["", "ascii", "é", "東", "😀", "a😀b", "\ud800", "x\udc00y", "\ud800\ud800\udc00", "mixed é 東 😀 \u0001"];
    for (const t of texts) expect(utf8Bytes(t)).toBe(new TextEncoder().encode(t).length);
    expect(jsonStringBytes('a"\n\u0001東')).toBe(new TextEncoder().encode(JSON.stringify('a"\n\u0001東')).length);
  });

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

  it("refuses an abort whose workflow output passes the limit, as an end's, keeping the claim and queuing nothing", async () => {
    const e = await createEngine("limits");
    await rollingWith(e, 1);
    const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const body = endBody("c1", c.episode_uuid, 0, "");
    // 2.5 MB: under the 4 MiB body limit, over what the trajectory's outbox record may hold.
    body.workflow_output = { ...body.workflow_output, log_metrics: { blob: "x".repeat(2_500_000) } };
    const res = await raw(`/e/${e.name}/abort_episode`, { token: e.tokens.client, body: JSON.stringify(body) });
    expect(res.status).toBe(413);
    expect(res.json?.["error"]).toBe("payload_too_large");
    expect(res.json?.["detail"]).toMatch(/^workflow_output is 2,500,\d{3} bytes as stored; /);
    expect(await e.as("client").canContinueEpisode({ client_uuid: "c1", episode_uuid: c.episode_uuid })).toEqual({ can_continue: true });
    expect(await engineStats(e)).toMatchObject({ claimed: 1, outbox: 0 });
    expect(await e.as("client").abortEpisode({ client_uuid: "c1", episode_uuid: c.episode_uuid })).toEqual({ success: true });
    expect(await engineStats(e)).toMatchObject({ claimed: 0, registered: 1, outbox: 1 });
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

describe("training runs keep D1 rows that fit", () => {
  /** A refusal for a value too large to store: 413, the name, the size, the limit. */
  async function refusedAsTooLarge(fn: () => Promise<unknown>, what: RegExp): Promise<void> {
    const r = await refusal(fn);
    expect(r.status).toBe(413);
    expect(r.code).toBe("payload_too_large");
    expect(r.detail).toMatch(new RegExp(`^${what.source} is [\\d,]+ bytes as stored; `));
    expect(r.detail).toContain(STORES);
  }

  async function selected(): Promise<TestEngine> {
    const e = await createEngine("limits");
    await runsAs(e, "trainer").reportCatalog(sampleCatalog());
    await runsAs(e, "operator").selectEnvironment({ name: "gsm8k" });
    return e;
  }

  it("refuses a catalog with an environment or problems too large for their rows, keeping the last catalog", async () => {
    const e = await createEngine("limits");
    const agent = runsAs(e, "trainer");
    await agent.reportCatalog(sampleCatalog());
    const big = { ...sampleCatalog().environments[0]!, name: "big", fields: [...GSM8K_FIELDS, { name: "prompt", type: "str", default: "x".repeat(1_950_000) }] };
    await refusedAsTooLarge(() => agent.reportCatalog(sampleCatalog({ environments: [big] })), /environments\.0 \(big\)/);
    const problems = Array.from({ length: 450 }, (_, i) => ({ file_path: `/opt/envs/${i}.py`, error: "E".repeat(4000) }));
    const dirs = Array.from({ length: 64 }, (_, i) => `/opt/${i}/${"d".repeat(4000)}`);
    await refusedAsTooLarge(() => agent.reportCatalog(sampleCatalog({ problems, directories: dirs })), /the directories and problems/);
    expect((await runsAs(e, "viewer").listEnvironments()).environments.map((x) => x.name)).toEqual(["countdown", "gsm8k"]);
  });

  it("refuses a locked value or an edit too large for its row", async () => {
    const e = await selected();
    const op = runsAs(e, "operator");
    await refusedAsTooLarge(() => op.setLockedFields({ set: [{ section: "trainer", name: "notes", value: "x".repeat(1_950_000) }] }), /set\.0\.value \(trainer\.notes\)/);
    await refusedAsTooLarge(() => op.editConfig("tokenizer_name", "x".repeat(1_950_000)), /value/);
    const config = await op.getConfig();
    expect(config.edits).toEqual({});
    // Only the default every run gets (its rollout server: the engine's Atropos API), nothing of the refused change.
    expect(config.locked_fields.map((l) => l.name)).toEqual(["rollout_server_url"]);
  });

  it("refuses to start a run whose YAML, made of edits that each fit, would not fit its row or its command", async () => {
    const e = await selected();
    const op = runsAs(e, "operator");
    await op.editConfig("tokenizer_name", "x".repeat(1_000_000));
    await op.editConfig("stop_words", ["y".repeat(1_000_000)]);
    await refusedAsTooLarge(() => op.startRun(), /config_yaml/);
    expect((await op.listRuns()).runs).toEqual([]);
    expect(await engineStats(e)).toMatchObject({ pending_commands: 0 });
  });

  it("refuses a run report whose metrics point is too large for its row", async () => {
    const e = await selected();
    const run = await runsAs(e, "operator").startRun();
    const agent = runsAs(e, "trainer");
    await refusedAsTooLarge(() => agent.reportRun(run.run_id, { status: "running", metrics: [{ index: 0, at: 1, values: { text: "x".repeat(1_950_000) } }] }), /metrics\.0\.values/);
    expect(await runsAs(e, "viewer").runStatus(run.run_id)).toMatchObject({ status: "pending", metrics: null });
  });

  it("refuses an inference test report too large for its row", async () => {
    const e = await selected();
    const t = await runsAs(e, "operator").startInferenceTest({ models: [{ model: "m", base_url: "http://127.0.0.1:8001/v1" }] });
    const model = { model: "m", base_url: "http://127.0.0.1:8001/v1", steps_tested: 0, total_completions: 0, correct_completions: 0, accuracy: 0, steps_with_correct: 0, step_success_rate: 0, steps: [], error: "boom", log_tail: "x".repeat(1_950_000), seconds: 1 };
    await refusedAsTooLarge(() => runsAs(e, "trainer").reportInferenceTest(t.test_id, { status: "failed", models: [model] }), /models/);
    expect(await runsAs(e, "viewer").inferenceTest(t.test_id)).toMatchObject({ status: "pending", models: [] });
  });
});
