/**
 * The MCP endpoint's protocol edges, inside workerd with raw JSON-RPC (the happy path with
 * the official MCP client is in test-e2e/runs-mcp.test.ts).
 */
import { beforeEach, describe, expect, it } from "vitest";
import { createEngine, ORIGIN, raw, workerFetch, type TestEngine } from "./support/harness";
import { runsAs, sampleCatalog } from "./support/runs";

let e: TestEngine;
beforeEach(async () => {
  e = await createEngine("runs-mcp");
});

const rpc = (token: string | undefined, body: unknown, headers: Record<string, string> = {}) =>
  raw(`/e/${e.name}/mcp`, { ...(token ? { token } : {}), body: typeof body === "string" ? body : JSON.stringify(body), headers: { accept: "application/json, text/event-stream", ...headers } });

const call = (token: string, name: string, args: unknown, id = 1) => rpc(token, { jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } });

function refsOf(v: unknown, out: string[] = []): string[] {
  if (Array.isArray(v)) v.forEach((x) => refsOf(x, out));
  else if (typeof v === "object" && v !== null) {
    for (const [k, x] of Object.entries(v)) {
      if (k === "$ref" && typeof x === "string") out.push(x);
      else refsOf(x, out);
    }
  }
  return out;
}

/** What a local JSON Pointer ref (`#/a/b`) names inside `doc`; undefined when nothing. */
function resolveRef(doc: unknown, ref: string): unknown {
  if (!ref.startsWith("#")) return undefined;
  let at: unknown = doc;
  for (const part of ref.slice(1).split("/").filter((p) => p !== "")) {
    const key = part.replace(/~1/g, "/").replace(/~0/g, "~");
    if (typeof at !== "object" || at === null || !(key in at)) return undefined;
    at = (at as Record<string, unknown>)[key];
  }
  return at;
}

describe("MCP endpoint", () => {
  it("initializes with the client's protocol version when supported, else its own", async () => {
    const init = await rpc(e.tokens.viewer, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "1" } } });
    expect(init.status).toBe(200);
    expect(init.json).toMatchObject({ jsonrpc: "2.0", id: 1, result: { protocolVersion: "2025-06-18", capabilities: { tools: {} }, serverInfo: { name: "rollout-exchange-runs" } } });
    const future = await rpc(e.tokens.viewer, { jsonrpc: "2.0", id: 2, method: "initialize", params: { protocolVersion: "2099-01-01" } });
    expect((future.json?.["result"] as { protocolVersion: string }).protocolVersion).toBe("2025-11-25");
    const notified = await rpc(e.tokens.viewer, { jsonrpc: "2.0", method: "notifications/initialized" });
    expect([notified.status, notified.text]).toEqual([202, ""]);
    expect((await rpc(e.tokens.viewer, { jsonrpc: "2.0", id: 3, method: "ping" })).json).toEqual({ jsonrpc: "2.0", id: 3, result: {} });
  });

  it("lists only the tools the token's role may call", async () => {
    const names = async (token: string) => ((await rpc(token, { jsonrpc: "2.0", id: 1, method: "tools/list" })).json?.["result"] as { tools: { name: string }[] }).tools.map((t) => t.name);
    expect(await names(e.tokens.viewer)).toEqual(["rl_list_environments", "rl_get_current_config", "rl_check_status", "rl_get_results", "rl_list_runs", "rl_get_inference_test", "rl_get_capture"]);
    expect(await names(e.tokens.operator)).toHaveLength(14);
    const listed = (await rpc(e.tokens.operator, { jsonrpc: "2.0", id: 1, method: "tools/list" })).json?.["result"] as { tools: { name: string; inputSchema: { type: string; properties: Record<string, unknown>; required?: string[] } }[] };
    const edit = listed.tools.find((t) => t.name === "rl_edit_config")!;
    expect(edit.inputSchema).toMatchObject({ type: "object", required: ["field", "value"] });
  });

  it("gives every tool a self-contained input schema: each $ref resolves inside it", async () => {
    const listed = (await rpc(e.tokens.operator, { jsonrpc: "2.0", id: 1, method: "tools/list" })).json?.["result"] as { tools: { name: string; inputSchema: unknown }[] };
    const dangling = listed.tools.flatMap((t) => refsOf(t.inputSchema).filter((r) => resolveRef(t.inputSchema, r) === undefined).map((r) => `${t.name}: ${r}`));
    expect(dangling).toEqual([]);
    // rl_edit_config's value is a JSON value, a recursive schema: it has refs to check.
    expect(refsOf(listed.tools.find((t) => t.name === "rl_edit_config")!.inputSchema)).not.toEqual([]);
  });

  it("answers tool refusals as tool errors with the same hints as REST, and a role's limits too", async () => {
    await runsAs(e, "trainer").reportCatalog(sampleCatalog());
    await runsAs(e, "operator").setLockedFields({ set: [{ section: "env", name: "max_token_length", value: 8192 }] });
    await call(e.tokens.operator, "rl_select_environment", { name: "gsm8k" });
    const locked = await call(e.tokens.operator, "rl_edit_config", { field: "max_token_length", value: 1 });
    const result = locked.json?.["result"] as { isError: boolean; structuredContent: Record<string, unknown>; content: { type: string; text: string }[] };
    expect(result.isError).toBe(true);
    expect(result.structuredContent).toMatchObject({ error: "field_locked", locked_value: 8192 });
    expect(JSON.parse(result.content[0]!.text)).toEqual(result.structuredContent);
    const forbidden = (await call(e.tokens.viewer, "rl_start_training", {})).json?.["result"] as { isError: boolean; structuredContent: Record<string, unknown> };
    expect(forbidden).toMatchObject({ isError: true, structuredContent: { error: "forbidden", role: "viewer" } });
    const badArgs = (await call(e.tokens.operator, "rl_edit_config", { field: 3 })).json?.["result"] as { isError: boolean; structuredContent: Record<string, unknown> };
    expect(badArgs).toMatchObject({ isError: true, structuredContent: { error: "invalid_arguments", tool: "rl_edit_config" } });
    // A role that may not call the tool is told so whatever its arguments, as by REST: not to fix them.
    for (const [tool, args] of [
      ["rl_start_training", { environment: 5 }],
      ["rl_edit_config", { field: 3 }],
    ] as const) {
      const refused = (await call(e.tokens.viewer, tool, args)).json?.["result"] as { isError: boolean; structuredContent: Record<string, unknown> };
      expect(refused).toMatchObject({ isError: true, structuredContent: { error: "forbidden", role: "viewer" } });
    }
    expect((await runsAs(e, "viewer").getConfig()).edits).toEqual({});
  });

  it("lets a viewer's agent read an inference test, as the viewer may by REST, and not start one", async () => {
    await runsAs(e, "trainer").reportCatalog(sampleCatalog());
    await runsAs(e, "operator").selectEnvironment({ name: "gsm8k" });
    const started = await runsAs(e, "operator").startInferenceTest({ models: [{ model: "m", base_url: "https://api.example/v1", api_key_env: "K" }] });
    const read = (await call(e.tokens.viewer, "rl_get_inference_test", { test_id: started.test_id })).json?.["result"] as { isError: boolean; structuredContent: Record<string, unknown> };
    expect(read).toMatchObject({ isError: false, structuredContent: { test_id: started.test_id, status: "pending" } });
    const start = (await call(e.tokens.viewer, "rl_test_inference", { models: [{ model: "m", base_url: "https://api.example/v1" }] })).json?.["result"];
    expect(start).toMatchObject({ isError: true, structuredContent: { error: "forbidden", role: "viewer" } });
    const unknown = (await call(e.tokens.viewer, "rl_get_inference_test", { test_id: "itest_nope" })).json?.["result"];
    expect(unknown).toMatchObject({ isError: true });
  });

  it("starts an inference test as the seed's rl_test_inference does: models by id on OpenRouter, the seed's three when none is named", async () => {
    await runsAs(e, "trainer").reportCatalog(sampleCatalog());
    await runsAs(e, "operator").selectEnvironment({ name: "gsm8k" });
    type Result = { isError: boolean; structuredContent: { request: { models: { model: string; base_url: string; api_key_env: string | null }[] } } };
    const start = async (args: unknown) => (await call(e.tokens.operator, "rl_test_inference", args)).json?.["result"] as Result;
    const none = await start({});
    expect(none.isError).toBe(false);
    expect(none.structuredContent.request.models.map((m) => [m.model, m.base_url, m.api_key_env])).toEqual(
      ["qwen/qwen3-8b", "zhipu-ai/glm-4-flash", "minimax/minimax-m1"].map((m) => [m, "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"]),
    );
    const byId = await start({ models: ["my/model"], num_steps: 1 });
    expect(byId.structuredContent.request.models).toEqual([{ model: "my/model", base_url: "https://openrouter.ai/api/v1", api_key_env: "OPENROUTER_API_KEY" }]);
    // The tool's input schema says so to the model that calls it.
    const tools = (await rpc(e.tokens.operator, { jsonrpc: "2.0", id: 1, method: "tools/list" })).json?.["result"] as { tools: { name: string; inputSchema: { properties: { models: { items: { anyOf: { type: string }[] } } } } }[] };
    const schema = tools.tools.find((t) => t.name === "rl_test_inference")!.inputSchema.properties.models;
    expect(schema.items.anyOf.map((s) => s.type)).toEqual(["object", "string"]);
  });

  it("reads and sets the ledger's capture: the operator's tool, refused to a viewer, checked like the route", async () => {
    type Result = { isError?: boolean; structuredContent: Record<string, unknown> };
    const result = async (token: string, name: string, args: unknown) => (await call(token, name, args)).json?.["result"] as Result;
    expect((await result(e.tokens.viewer, "rl_get_capture", {})).structuredContent).toMatchObject({ capture: "messages", retention_days: 30 });
    expect(await result(e.tokens.viewer, "rl_set_capture", { capture: "off" })).toMatchObject({ isError: true, structuredContent: { error: "forbidden" } });
    expect(await result(e.tokens.operator, "rl_set_capture", { capture: "everything" })).toMatchObject({ isError: true, structuredContent: { error: "invalid_arguments" } });
    const set = await result(e.tokens.operator, "rl_set_capture", { capture: "tokens", retention_days: 14 });
    expect(set.structuredContent).toMatchObject({ capture: "tokens", retention_days: 14, next_steps: ["rl_get_capture() to confirm"] });
    expect((await raw(`/e/${e.name}/ledger/config`, { token: e.tokens.viewer })).json).toEqual({ capture: "tokens", retention_days: 14 });
  });

  it("says why the environment list is empty, with next steps that can work", async () => {
    const list = async () => (await call(e.tokens.viewer, "rl_list_environments", {})).json?.["result"] as { isError: boolean; structuredContent: Record<string, unknown>; content: { text: string }[] };
    const none = await list();
    expect(none.isError).toBe(false);
    expect(none.structuredContent).toMatchObject({ count: 0, catalog_status: { state: "no_agent" } });
    expect(none.content[0]!.text).toContain("No agent has connected to this engine");
    expect(none.structuredContent["next_steps"]).toEqual([expect.stringMatching(/^start the rollout agent on the GPU host/), "rl_list_environments() again afterwards"]);

    await e.as("trainer").heartbeat({ agent_id: "a", host: "gpu-1", pid: 1, trainer: { state: "idle" }, runs_off_reason: "no runs config on this host" });
    expect((await list()).structuredContent).toMatchObject({
      catalog_status: { state: "no_runs_config", detail: expect.stringContaining("no runs config on this host") },
      next_steps: [expect.stringMatching(/set ROLLOUT_RUNS_CONFIG/), "rl_list_environments() again afterwards"],
    });

    await e.as("trainer").heartbeat({ agent_id: "a", host: "gpu-1", pid: 1, trainer: { state: "idle" } });
    expect((await list()).structuredContent).toMatchObject({ catalog_status: { state: "not_scanned" }, next_steps: [expect.stringMatching(/^rl_scan_environments\(\)/), expect.any(String)] });
    const scan = (await call(e.tokens.operator, "rl_scan_environments", {})).json?.["result"] as { structuredContent: { command_seq: number } };
    expect((await list()).structuredContent).toMatchObject({ catalog_status: { state: "scan_pending" } });
    await e.as("trainer").ackCommand({ seq: scan.structuredContent.command_seq, ok: false, detail: "python3 not found" });
    expect((await list()).structuredContent).toMatchObject({ catalog_status: { state: "scan_failed", detail: expect.stringContaining("python3 not found") } });

    await runsAs(e, "trainer").reportCatalog(sampleCatalog());
    expect((await list()).structuredContent).toMatchObject({ count: 2, catalog_status: { state: "ready" }, next_steps: [expect.stringMatching(/^rl_select_environment/), expect.any(String)] });
  });

  it("reads rl_list_runs' limit as the integer it advertises: JSON numbers 1 to 100, not text or booleans read as numbers", async () => {
    const tools = (await rpc(e.tokens.operator, { jsonrpc: "2.0", id: 1, method: "tools/list" })).json?.["result"] as { tools: { name: string; inputSchema: { properties: Record<string, unknown> } }[] };
    expect(tools.tools.find((t) => t.name === "rl_list_runs")!.inputSchema.properties["limit"]).toMatchObject({ type: "integer", minimum: 1, maximum: 100 });
    const listed = async (limit: unknown) => (await call(e.tokens.viewer, "rl_list_runs", { limit })).json?.["result"] as { isError: boolean; structuredContent: Record<string, unknown> };
    // "5", true, "0x10", [7] and " 3 " were read as 5, 1, 16, 7 and 3.
    for (const limit of [5.7, -1, 0, 101, 1e9, "5", true, "0x10", [7], " 3 "]) {
      const r = await listed(limit);
      expect(r.isError, JSON.stringify(limit)).toBe(true);
      expect(r.structuredContent, JSON.stringify(limit)).toMatchObject({ error: "invalid_arguments", tool: "rl_list_runs", detail: expect.stringMatching(/limit/) });
    }
    expect((await listed(5)).isError).toBe(false);
    expect((await call(e.tokens.viewer, "rl_list_runs", {})).json?.["result"]).toMatchObject({ isError: false });
    // The REST route's query string is text, read as a number.
    expect((await raw(`/e/${e.name}/runs?limit=5`, { token: e.tokens.viewer })).status).toBe(200);
  });

  it("points at selecting an environment when none is selected, not at editing or starting", async () => {
    await runsAs(e, "trainer").reportCatalog(sampleCatalog());
    const none = (await call(e.tokens.operator, "rl_get_current_config", {})).json?.["result"] as { structuredContent: { environment: unknown; next_steps: string[] } };
    expect(none.structuredContent.environment).toBeNull();
    expect(none.structuredContent.next_steps).toEqual(["rl_list_environments() to see the environments", "rl_select_environment(name) first: no environment is selected"]);
    await runsAs(e, "operator").selectEnvironment({ name: "gsm8k" });
    const some = (await call(e.tokens.operator, "rl_get_current_config", {})).json?.["result"] as { structuredContent: { next_steps: string[] } };
    expect(some.structuredContent.next_steps).toContainEqual(expect.stringMatching(/^rl_start_training\(\)/));
  });

  it("gives a run's status and results each metric's latest value, not only the last line's (an eval logged every few steps), and an unknown run id the runs there are", async () => {
    await runsAs(e, "trainer").reportCatalog(sampleCatalog());
    await runsAs(e, "operator").setLockedFields({ set: [{ section: "env", name: "max_token_length", value: 8192 }] });
    await runsAs(e, "operator").selectEnvironment({ name: "gsm8k" });
    const run = await runsAs(e, "operator").startRun();
    await runsAs(e, "trainer").reportRun(run.run_id, {
      status: "running",
      metrics: [
        { index: 0, step: 25, at: 1, values: { "train/reward_mean": 0.3, "eval/percent_correct": 0.55 } },
        { index: 1, step: 26, at: 2, values: { "train/reward_mean": 0.4 } },
      ],
    });
    for (const tool of ["rl_check_status", "rl_get_results"]) {
      const r = (await call(e.tokens.viewer, tool, { run_id: run.run_id })).json?.["result"] as { structuredContent: { metrics: unknown } };
      expect(r.structuredContent.metrics).toEqual({ index: 1, step: 26, at: 2, values: { "train/reward_mean": 0.4, "eval/percent_correct": 0.55 } });
    }
    for (const tool of ["rl_check_status", "rl_stop_training"]) {
      const r = (await call(e.tokens.operator, tool, { run_id: "run_zzzzzzzzzz" })).json?.["result"] as { isError: boolean; structuredContent: Record<string, unknown> };
      expect(r.isError).toBe(true);
      expect(r.structuredContent).toMatchObject({ error: "unknown_run", run_id: "run_zzzzzzzzzz", active_runs: [run.run_id], recent_runs: [run.run_id] });
    }
  });

  it("answers protocol mistakes with JSON-RPC errors", async () => {
    const unknownTool = await call(e.tokens.operator, "rl_make_coffee", {});
    expect(unknownTool.json).toMatchObject({ id: 1, error: { code: -32602, message: expect.stringMatching(/Unknown tool 'rl_make_coffee'/) } });
    expect((await rpc(e.tokens.viewer, { jsonrpc: "2.0", id: 9, method: "resources/list" })).json).toMatchObject({ id: 9, error: { code: -32601 } });
    const parse = await rpc(e.tokens.viewer, "{oops");
    expect([parse.status, (parse.json?.["error"] as { code: number }).code]).toEqual([400, -32700]);
    const invalid = await rpc(e.tokens.viewer, { id: 4, method: "ping" });
    expect([invalid.status, invalid.json]).toEqual([400, expect.objectContaining({ id: 4, error: expect.objectContaining({ code: -32600 }) })]);
    expect((await rpc(e.tokens.viewer, [])).status).toBe(400);
    const batch = await rpc(e.tokens.viewer, [
      { jsonrpc: "2.0", id: "a", method: "ping" },
      { jsonrpc: "2.0", method: "notifications/initialized" },
      { jsonrpc: "2.0", id: "b", method: "tools/list" },
    ]);
    expect((batch.json as unknown as { id: string }[]).map((m) => m.id)).toEqual(["a", "b"]);
    const version = await rpc(e.tokens.viewer, { jsonrpc: "2.0", id: 1, method: "ping" }, { "mcp-protocol-version": "1999-01-01" });
    expect([version.status, version.json?.["error"]]).toEqual([400, "unsupported_protocol_version"]);
    const huge = await rpc(e.tokens.viewer, { jsonrpc: "2.0", id: 1, method: "ping", params: { pad: "x".repeat(4 * 1024 * 1024) } });
    expect([huge.status, huge.json?.["error"]]).toEqual([413, "payload_too_large"]);
  });

  it("answers params given by position with Invalid params to the request's id, and ignores them in a notification", async () => {
    const positional = await rpc(e.tokens.operator, { jsonrpc: "2.0", id: 7, method: "tools/call", params: ["rl_list_runs", {}] });
    expect([positional.status, positional.json]).toEqual([200, { jsonrpc: "2.0", id: 7, error: { code: -32602, message: expect.stringMatching(/by name/) } }]);
    const notified = await rpc(e.tokens.operator, { jsonrpc: "2.0", method: "notifications/initialized", params: [] });
    expect([notified.status, notified.text]).toEqual([202, ""]);
  });

  it("refuses tool arguments nested deeper than 128 levels, and changes nothing", async () => {
    await runsAs(e, "trainer").reportCatalog(sampleCatalog());
    await runsAs(e, "operator").selectEnvironment({ name: "gsm8k" });
    const deep = (n: number) => "[".repeat(n) + "]".repeat(n);
    const edit = (value: string) => rpc(e.tokens.operator, `{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "rl_edit_config", "arguments": {"field": "stop_words", "value": ${value}}}}`);
    const refused = await edit(deep(100_000));
    expect([refused.status, refused.json?.["error"]]).toEqual([400, expect.objectContaining({ code: -32600, message: expect.stringContaining("deeper than 128") })]);
    expect((await runsAs(e, "viewer").getConfig()).edits).toEqual({});
    // Nesting short of the limit is a value like any other (here the wrong type for the field).
    expect((await edit(deep(100))).json?.["result"]).toMatchObject({ isError: true, structuredContent: { error: "wrong_type" } });
  });

  it("needs an engine token (also in the path), and offers no GET stream", async () => {
    expect((await rpc(undefined, { jsonrpc: "2.0", id: 1, method: "ping" })).status).toBe(401);
    expect((await rpc("rx_viewer_not-a-token", { jsonrpc: "2.0", id: 1, method: "ping" })).status).toBe(401);
    // Its 401s say how to authenticate (RFC 6750), as MCP clients read them; so do the REST routes'.
    const ping = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" });
    const challenge = async (path: string, token?: string, body?: string) =>
      (await workerFetch(`${ORIGIN}${path}`, { method: body === undefined ? "GET" : "POST", body: body ?? null, headers: { "content-type": "application/json", ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) } })).headers.get("www-authenticate");
    expect(await challenge(`/e/${e.name}/mcp`, undefined, ping)).toBe('Bearer realm="rollout-exchange"');
    expect(await challenge(`/e/${e.name}/mcp`, "rx_viewer_not-a-token", ping)).toBe('Bearer realm="rollout-exchange", error="invalid_token"');
    expect(await challenge(`/e/${e.name}/get_engine_status`)).toBe('Bearer realm="rollout-exchange"');
    expect(await challenge(`/e/${e.name}/get_engine_status`, "rx_viewer_not-a-token")).toBe('Bearer realm="rollout-exchange", error="invalid_token"');
    const viaPath = await raw(`/e/${e.name}/t/${e.tokens.viewer}/mcp`, { body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }) });
    expect(viaPath.json).toEqual({ jsonrpc: "2.0", id: 1, result: {} });
    const get = await raw(`/e/${e.name}/mcp`, { token: e.tokens.viewer });
    expect(get.status).toBe(405);
  });
});
