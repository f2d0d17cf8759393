/** Inference tests through the real Worker: queued for the agent, results reported, refusals. */
import { beforeEach, describe, expect, it } from "vitest";
import { createEngine, raw, type TestEngine } from "./support/harness";
import { refusal, runsAs, sampleCatalog } from "./support/runs";

let e: TestEngine;
const MODELS = [
  { model: "qwen/qwen3-8b", base_url: "https://models.example/v1", api_key_env: "OPENROUTER_API_KEY" },
  { model: "local", base_url: "http://127.0.0.1:8001/v1" },
];

beforeEach(async () => {
  e = await createEngine("runs-inf");
  await runsAs(e, "trainer").reportCatalog(sampleCatalog());
});

const result = (model: string, correct: number, total: number) => ({
  model,
  base_url: "http://x/v1",
  steps_tested: 2,
  total_completions: total,
  correct_completions: correct,
  accuracy: total ? correct / total : 0,
  steps_with_correct: correct ? 1 : 0,
  step_success_rate: correct ? 0.5 : 0,
  steps: [],
  error: null,
  seconds: 3,
});

describe("inference tests", () => {
  it("queue a test_inference command with the environment and models, then keep the agent's results", async () => {
    await runsAs(e, "operator").selectEnvironment({ name: "gsm8k" });
    const t = await runsAs(e, "operator").startInferenceTest({ models: MODELS, num_steps: 2, group_size: 4, timeout_seconds: 60 });
    expect(t).toMatchObject({ status: "pending", environment: "gsm8k", summary: null, models: [] });
    expect(t.message).toMatch(/2 steps x 4 completions = 8 rollouts per model, 2 model\(s\)/);
    const { commands } = await e.as("trainer").pollCommands();
    expect(commands.map((c) => c.body)).toEqual([
      {
        kind: "test_inference",
        test_id: t.test_id,
        environment: { name: "gsm8k", class_name: "GSM8kEnv", file_path: "/opt/envs/gsm8k_server.py" },
        num_steps: 2,
        group_size: 4,
        models: [MODELS[0], { ...MODELS[1], api_key_env: null }],
        timeout_seconds: 60,
      },
    ]);
    const agent = runsAs(e, "trainer");
    expect((await agent.reportInferenceTest(t.test_id, { status: "running", detail: "model 1 of 2" })).status).toBe("running");
    const failedModel = { ...result("local", 0, 0), steps_tested: 0, error: "timed out after 60 s" };
    const done = await agent.reportInferenceTest(t.test_id, { status: "done", models: [result("qwen/qwen3-8b", 5, 8), failedModel] });
    expect(done.summary).toEqual({ models_tested: 2, models_succeeded: 1, best_model: "qwen/qwen3-8b", avg_accuracy: 0.625, environment_working: true });
    expect(done.finished_at).toEqual(expect.any(Number));
    // A report repeated after a lost answer changes nothing.
    await agent.reportInferenceTest(t.test_id, { status: "failed", detail: "late" });
    expect(await runsAs(e, "viewer").inferenceTest(t.test_id)).toEqual(done);
  });

  it("take a model by its id alone, called on OpenRouter as the seed called it, and test the seed's three models when none is named", async () => {
    await runsAs(e, "operator").selectEnvironment({ name: "gsm8k" });
    const openRouter = { base_url: "https://openrouter.ai/api/v1", api_key_env: "OPENROUTER_API_KEY" };
    const mixed = await runsAs(e, "operator").startInferenceTest({ models: ["minimax/minimax-m1", MODELS[1]!] });
    expect(mixed.request.models).toEqual([{ model: "minimax/minimax-m1", ...openRouter }, { ...MODELS[1], api_key_env: null }]);
    const seeds = await raw(`/e/${e.name}/runs/inference_tests`, { token: e.tokens.operator, body: "{}" });
    expect(seeds.status).toBe(200);
    expect(seeds.json).toMatchObject({ request: { num_steps: 3, group_size: 16, models: ["qwen/qwen3-8b", "zhipu-ai/glm-4-flash", "minimax/minimax-m1"].map((model) => ({ model, ...openRouter })) } });
    const { commands } = await e.as("trainer").pollCommands();
    expect(commands.map((c) => (c.body.kind === "test_inference" ? c.body.models.map((m) => m.model) : c.body.kind))).toEqual([
      ["minimax/minimax-m1", "local"],
      ["qwen/qwen3-8b", "zhipu-ai/glm-4-flash", "minimax/minimax-m1"],
    ]);
    // An empty list names no model: refused, as are ids no model has.
    for (const models of [[], [""], ["x".repeat(201)]]) expect((await refusal(() => runsAs(e, "operator").startInferenceTest({ models }))).status).toBe(422);
  });

  it("keep a finished test finished when a progress report, retried, crosses the final one", async () => {
    await runsAs(e, "operator").selectEnvironment({ name: "gsm8k" });
    const t = await runsAs(e, "operator").startInferenceTest({ models: MODELS.slice(0, 1), num_steps: 2, group_size: 4 });
    const agent = runsAs(e, "trainer");
    // Both read the test unfinished; whichever is applied last must not take the result back.
    const [finished] = await Promise.all([
      agent.reportInferenceTest(t.test_id, { status: "done", models: [result("qwen/qwen3-8b", 5, 8)] }),
      agent.reportInferenceTest(t.test_id, { status: "running", detail: "model 1 of 1" }),
    ]);
    expect(finished.status).toBe("done");
    const after = await runsAs(e, "viewer").inferenceTest(t.test_id);
    expect({ status: after.status, models: after.models.length, finished: after.finished_at !== null }).toEqual({ status: "done", models: 1, finished: true });
  });

  it("refuse bad requests, unknown tests and other roles", async () => {
    expect((await refusal(() => runsAs(e, "operator").startInferenceTest({ models: MODELS }))).code).toBe("no_environment_selected");
    await runsAs(e, "operator").selectEnvironment({ name: "gsm8k" });
    const bad = [{ models: [] }, { models: [{ model: "m", base_url: "ftp://x" }] }, { models: MODELS, num_steps: 0 }, { models: [{ ...MODELS[0], api_key_env: "sk-live-secret" }] }];
    for (const body of bad) expect((await raw(`/e/${e.name}/runs/inference_tests`, { token: e.tokens.operator, body: JSON.stringify(body) })).status).toBe(422);
    // The agent's own settings: an operator must not have the trainer token sent to a base URL of its choosing.
    const own = await raw(`/e/${e.name}/runs/inference_tests`, { token: e.tokens.operator, body: JSON.stringify({ models: [{ ...MODELS[0], api_key_env: "ROLLOUT_TRAINER_TOKEN" }] }) });
    expect(own.status).toBe(422);
    expect(own.text).toContain("api_key_env may not name a ROLLOUT_* variable");
    expect((await refusal(() => runsAs(e, "viewer").startInferenceTest({ models: MODELS }))).status).toBe(403);
    expect((await refusal(() => runsAs(e, "viewer").inferenceTest("itest_nope1234"))).status).toBe(404);
    expect((await refusal(() => runsAs(e, "trainer").reportInferenceTest("itest_nope1234", { status: "done" }))).status).toBe(404);
    expect((await raw(`/e/${e.name}/runs/inference_tests/bogus`, { token: e.tokens.viewer })).status).toBe(404);
    expect((await e.as("trainer").pollCommands()).commands).toEqual([]);
  });
});
