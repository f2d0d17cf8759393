/**
 * Inference tests with real Python: the fixture environment's `process` mode calls an
 * OpenAI-compatible endpoint (a small local server that answers right, wrong, or never) and
 * writes its scored JSONL, from which the agent computes accuracy per model, with a deadline.
 */
import { existsSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { realClock } from "../../src/clock";
import { testModel } from "../../src/runs/inference-test";
import { tempDir } from "../support/temp";
import { ENVS, runsConfig } from "./support";

let server: Server;
let base: string;
const seenKeys: string[] = [];
const state = tempDir();

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (d: Buffer) => (body += d.toString()));
    req.on("end", () => {
      seenKeys.push(req.headers.authorization ?? "");
      const r = JSON.parse(body) as { model: string; messages: Array<{ content: string }> };
      if (r.model === "hang") return; // never answers
      const [, a, b] = /What is (\d+) \+ (\d+)\?/.exec(r.messages[0]!.content) ?? [];
      // "half" is right on even steps only.
      const right = r.model === "right" || (r.model === "half" && Number(a) % 2 === 0);
      const content = right ? String(Number(a) + Number(b)) : "I think 42";
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ choices: [{ index: 0, message: { role: "assistant", content } }] }));
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
  state.remove();
});

const cmd = (timeout = 30) => ({
  kind: "test_inference" as const,
  test_id: "itest_abc123",
  environment: { name: "gsm8k", class_name: "GSM8kEnv", file_path: `${ENVS}/gsm8k_env.py` },
  num_steps: 2,
  group_size: 3,
  models: [],
  timeout_seconds: timeout,
});
const config = () => runsConfig({ workDir: ENVS }, state.path);

describe("inference test of one model", () => {
  it("reads accuracy from the process mode's scored output", async () => {
    process.env["TEST_MODEL_KEY"] = "sk-test-secret";
    const right = await testModel(cmd(), { model: "right", base_url: base, api_key_env: "TEST_MODEL_KEY" }, config(), realClock, new AbortController().signal);
    expect(right).toMatchObject({ model: "right", steps_tested: 2, total_completions: 6, correct_completions: 6, accuracy: 1, steps_with_correct: 2, step_success_rate: 1, error: null });
    expect(right.steps).toEqual([
      { step: 1, completions: 3, correct: 3, scores: [1, 1, 1] },
      { step: 2, completions: 3, correct: 3, scores: [1, 1, 1] },
    ]);
    expect(seenKeys).toContain("Bearer sk-test-secret");
    expect(right.log_tail).not.toContain("sk-test-secret");
    const half = await testModel(cmd(), { model: "half", base_url: base, api_key_env: null }, config(), realClock, new AbortController().signal);
    expect(half).toMatchObject({ accuracy: 0.5, steps_with_correct: 1, step_success_rate: 0.5, correct_completions: 3 });
  });

  it("reports a model that does not answer by the deadline, a missing key, and an endpoint that fails", async () => {
    const hang = await testModel(cmd(2), { model: "hang", base_url: base, api_key_env: null }, config(), realClock, new AbortController().signal);
    expect(hang).toMatchObject({ steps_tested: 0, accuracy: 0, error: "timed out after 2 s" });
    const nokey = await testModel(cmd(), { model: "right", base_url: base, api_key_env: "NO_SUCH_KEY_VAR" }, config(), realClock, new AbortController().signal);
    expect(nokey.error).toBe("the environment variable NO_SUCH_KEY_VAR is not set on the GPU host");
    const down = await testModel(cmd(), { model: "right", base_url: "http://127.0.0.1:9/v1", api_key_env: null }, config(), realClock, new AbortController().signal);
    expect(down.error).toMatch(/the process mode exited with code 1/);
    expect(down.log_tail).toMatch(/Connection refused|URLError/);
  });

  it("refuses to send the agent's own ROLLOUT_* variables, its trainer token above all, as a key to the caller's base URL", async () => {
    const before = process.env.ROLLOUT_TRAINER_TOKEN;
    process.env.ROLLOUT_TRAINER_TOKEN = "rx_trainer_not_an_inference_key";
    try {
      // An "environment" that would record the arguments it was run with, the key among them.
      const env = join(state.path, "env.sh");
      const argv = join(state.path, "argv.txt");
      writeFileSync(env, `printf '%s\\n' "$@" > ${argv}\n`);
      const model = { model: "m", base_url: "https://operator.example/v1", api_key_env: "ROLLOUT_TRAINER_TOKEN" };
      const out = await testModel({ ...cmd(), environment: { name: "e", class_name: "E", file_path: env } }, model, runsConfig({ python: "sh" }, state.path), realClock, new AbortController().signal);
      expect(out.error).toBe("api_key_env ROLLOUT_TRAINER_TOKEN is refused: ROLLOUT_* variables are the agent's own settings (its trainer token among them), not inference keys");
      expect(existsSync(argv)).toBe(false);
    } finally {
      if (before === undefined) delete process.env.ROLLOUT_TRAINER_TOKEN;
      else process.env.ROLLOUT_TRAINER_TOKEN = before;
    }
  });
});
