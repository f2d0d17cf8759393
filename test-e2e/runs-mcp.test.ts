/**
 * The training-runs MCP tools through the official MCP client (Client + StreamableHTTP
 * transport from @modelcontextprotocol/sdk) against the real Worker on Miniflare: the flow an
 * LLM agent follows, from listing environments to reading results, with the refusals it must
 * be able to act on. The rendered run YAML is read back by Python's own YAML parser.
 */
import { execFileSync } from "node:child_process";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLocalExchange, type LocalExchange } from "../scripts/local/exchange";
import { AdminClient, RunsClient } from "../src/client";
import { sampleCatalog } from "../test/support/sample-catalog";
import { toYaml } from "../src/runs/yaml";

const ADMIN = "runs-mcp-admin-token";
let exchange: LocalExchange;
let tokens: Record<string, string>;
const ENGINE = "mcp-runs";

type ToolResult = { isError?: boolean; structuredContent?: Record<string, unknown>; content: Array<{ type: string; text?: string }> };

async function connect(url: string, token?: string): Promise<Client> {
  const client = new Client({ name: "runs-e2e", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(url), token ? { requestInit: { headers: { authorization: `Bearer ${token}` } } } : {});
  await client.connect(transport);
  return client;
}

async function call(client: Client, name: string, args: Record<string, unknown> = {}): Promise<ToolResult> {
  const r = (await client.callTool({ name, arguments: args })) as ToolResult;
  // The text is the same JSON as the structured content, for clients that show only text.
  expect(JSON.parse(r.content[0]?.text ?? "null")).toEqual(r.structuredContent);
  return r;
}

const ok = async (client: Client, name: string, args: Record<string, unknown> = {}) => {
  const r = await call(client, name, args);
  expect(r.isError, JSON.stringify(r.structuredContent)).toBe(false);
  return r.structuredContent as Record<string, unknown>;
};

beforeAll(async () => {
  exchange = await startLocalExchange({ port: 0, persistDir: null, adminToken: ADMIN, claimKeySecret: "runs-mcp-claim-secret" });
  const created = await new AdminClient({ origin: exchange.url, adminToken: ADMIN }).createEngine(ENGINE);
  tokens = created.tokens;
  const base = `${exchange.url}/e/${ENGINE}`;
  await new RunsClient({ baseUrl: base, token: tokens["trainer"] }).reportCatalog(sampleCatalog());
  await new RunsClient({ baseUrl: base, token: tokens["operator"] }).setLockedFields({
    set: [
      { section: "env", name: "max_token_length", value: 8192 },
      { section: "openai", name: "base_url", value: "http://localhost:8001/v1" },
      { section: "trainer", name: "learning_rate", value: 0.00004 },
    ],
  });
});

afterAll(async () => {
  await exchange?.stop();
});

describe("rl_* tools through the MCP client", () => {
  it("takes an agent from environments to results", async () => {
    const mcp = await connect(`${exchange.url}/e/${ENGINE}/mcp`, tokens["operator"]);
    expect(mcp.getServerVersion()).toMatchObject({ name: "rollout-exchange-runs" });
    expect(mcp.getInstructions()).toMatch(/rl_list_environments -> rl_select_environment/);
    const { tools } = await mcp.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(
      [
        "rl_check_status",
        "rl_edit_config",
        "rl_get_current_config",
        "rl_get_results",
        "rl_list_environments",
        "rl_list_runs",
        "rl_scan_environments",
        "rl_select_environment",
        "rl_start_training",
        "rl_stop_training",
        "rl_test_inference",
        "rl_get_inference_test",
        "rl_get_capture",
        "rl_set_capture",
      ].sort(),
    );
    expect(tools.find((t) => t.name === "rl_select_environment")?.inputSchema).toMatchObject({ type: "object", properties: { name: { type: "string" } }, required: ["name"] });

    const envs = await ok(mcp, "rl_list_environments");
    expect(envs["count"]).toBe(2);
    expect(envs["next_steps"]).toEqual(expect.arrayContaining([expect.stringMatching(/rl_select_environment/)]));

    const unknown = await call(mcp, "rl_select_environment", { name: "chess" });
    expect(unknown).toMatchObject({ isError: true, structuredContent: { error: "unknown_environment", available: ["countdown", "gsm8k"] } });

    const selected = await ok(mcp, "rl_select_environment", { name: "gsm8k" });
    expect(selected["environment"]).toBe("gsm8k");

    const locked = await call(mcp, "rl_edit_config", { field: "max_token_length", value: 1024 });
    expect(locked).toMatchObject({ isError: true, structuredContent: { error: "field_locked", locked_value: 8192 } });
    const wrong = await call(mcp, "rl_edit_config", { field: "group_size", value: "eight" });
    expect(wrong).toMatchObject({ isError: true, structuredContent: { error: "wrong_type", expected_type: "int" } });
    const nofield = await call(mcp, "rl_edit_config", { field: "batch_sizee", value: 1 });
    expect(nofield).toMatchObject({ isError: true, structuredContent: { error: "unknown_field" } });
    expect(await ok(mcp, "rl_edit_config", { field: "group_size", value: 8 })).toMatchObject({ edits: { group_size: 8 } });

    const cfg = await ok(mcp, "rl_get_current_config");
    // Python reads the YAML a run would get as the values the exchange holds.
    const parsed = JSON.parse(
      execFileSync("python3", ["-c", "import sys, json, yaml; print(json.dumps(yaml.safe_load(sys.stdin.read())))"], { input: String(cfg["yaml"]), encoding: "utf8" }),
    ) as Record<string, Record<string, unknown>>;
    expect(parsed["env"]).toMatchObject({ group_size: 8, max_token_length: 8192, temperature: 1.0, use_wandb: true, split: "train" });
    expect(parsed["openai"]).toEqual([{ base_url: "http://localhost:8001/v1" }]);
    expect(parsed["trainer"]).toEqual({ learning_rate: 0.00004 });

    const started = await ok(mcp, "rl_start_training");
    const runId = String(started["run_id"]);
    expect(started).toMatchObject({ status: "pending", environment: "gsm8k" });
    const again = await call(mcp, "rl_start_training");
    expect(again).toMatchObject({ isError: true, structuredContent: { error: "run_active", active_run_id: runId } });

    // The agent reports the run running, with a metric.
    const agent = new RunsClient({ baseUrl: `${exchange.url}/e/${ENGINE}`, token: tokens["trainer"] });
    await agent.reportRun(runId, {
      status: "running",
      processes: [{ name: "trainer", order: 0, state: "ready", pid: 4242 }],
      metrics: [{ index: 0, step: 1, at: Date.now() / 1000, values: { "train/reward_mean": 0.5 } }],
    });
    const status = await ok(mcp, "rl_check_status", {});
    expect(status).toMatchObject({ run_id: runId, status: "running", metrics: { values: { "train/reward_mean": 0.5 } } });
    expect(await ok(mcp, "rl_list_runs", { limit: 5 })).toMatchObject({ count: 1, active_run_id: runId });

    const test = await ok(mcp, "rl_test_inference", { models: [{ model: "tiny", base_url: "http://127.0.0.1:9/v1" }], num_steps: 1, group_size: 2 });
    expect(test).toMatchObject({ status: "pending", environment: "gsm8k" });
    expect(await ok(mcp, "rl_test_inference", { test_id: test["test_id"] })).toMatchObject({ test_id: test["test_id"], status: "pending" });
    expect(await ok(mcp, "rl_get_inference_test", { test_id: test["test_id"] })).toMatchObject({ test_id: test["test_id"], status: "pending" });
    // No models: the seed's three, on OpenRouter, as hermes-agent's tool tests them.
    const seeds = await ok(mcp, "rl_test_inference", {});
    expect(seeds).toMatchObject({ status: "pending", request: { models: ["qwen/qwen3-8b", "zhipu-ai/glm-4-flash", "minimax/minimax-m1"].map((model) => ({ model, base_url: "https://openrouter.ai/api/v1" })) } });
    expect(await call(mcp, "rl_test_inference", { models: [] })).toMatchObject({ isError: true });

    expect(await ok(mcp, "rl_stop_training", { run_id: runId, reason: "enough" })).toMatchObject({ status: "stopping" });
    await agent.reportRun(runId, { status: "stopped", processes: [{ name: "trainer", order: 0, state: "stopped", pid: 4242, signal: "SIGTERM" }] });
    const results = await ok(mcp, "rl_get_results", { run_id: runId });
    expect(results).toMatchObject({ status: "stopped", metrics_history: [{ index: 0 }] });
    expect((results["events"] as Array<{ kind: string }>).map((e) => e.kind)).toEqual(["created", "running", "stop_requested", "stopped"]);
    await mcp.close();
  });

  it("gives a viewer's agent the read-only tools, with the token in the URL path", async () => {
    const mcp = await connect(`${exchange.url}/e/${ENGINE}/t/${tokens["viewer"]}/mcp`);
    const { tools } = await mcp.listTools();
    expect(tools.map((t) => t.name)).toEqual(["rl_list_environments", "rl_get_current_config", "rl_check_status", "rl_get_results", "rl_list_runs", "rl_get_inference_test", "rl_get_capture"]);
    expect(await call(mcp, "rl_stop_training", {})).toMatchObject({ isError: true, structuredContent: { error: "forbidden" } });
    expect(await call(mcp, "rl_get_results", { run_id: "run_nosuchrun" })).toMatchObject({ isError: true, structuredContent: { error: "unknown_run" } });
    await mcp.close();
  });

  it("refuses to connect without a valid token", async () => {
    await expect(connect(`${exchange.url}/e/${ENGINE}/mcp`)).rejects.toThrow(/401|missing_token/);
    await expect(connect(`${exchange.url}/e/${ENGINE}/mcp`, "rx_operator_forged")).rejects.toThrow(/401|invalid_token/);
  });
});

describe("a run's YAML in PyYAML", () => {
  it("reads back as the same JSON, whatever characters its strings hold", () => {
    // Every string a config edit may hold, the ones JSON leaves raw and YAML 1.1 refuses or folds included.
    const awkward = ["a\u007fb", "\u0085", "c\u0090d", "\u2028\u2029", "\ufeffx", "yes", "1e3", "tab\there", "é😀", "\u0000\u001f"];
    const value = { env: Object.fromEntries(awkward.map((s, i) => [`k${i}${s}`, s])), list: awkward };
    const read = execFileSync("python3", ["-c", "import sys, json, yaml; print(json.dumps(yaml.safe_load(sys.stdin.read())))"], { input: toYaml(value), encoding: "utf8" });
    expect(JSON.parse(read)).toEqual(value);
  });
});
