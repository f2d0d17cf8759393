/**
 * What a route answers, and leaves written, when D1 fails part-way through it: a failure is no
 * answer about the data (an engine that does not exist is not "already there"), a request whose
 * work reached the agent is answered as done (a run queued for it is not told as failed), and
 * one JSON-RPC request's failure is its own error, not the batch's. The Worker is real, its D1
 * real but for the statements made to fail (test/support/failing-d1.ts).
 */
import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import { createEngine, uniqueName } from "./support/harness";
import { failingD1, fetchWithD1 } from "./support/failing-d1";
import { fixRunsClock, runsAs, sampleCatalog } from "./support/runs";

describe("D1 failing part-way through a request", () => {
  it("creating an engine: a 500 internal_error with an error id, not 409 engine_exists, and the name left free", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const name = uniqueName("d1-create");
    const res = await fetchWithD1(failingD1((sql) => /insert into "engines"/i.test(sql)), "/admin/engines", { method: "POST", body: JSON.stringify({ name }) });
    logged.mockRestore();
    expect(res).toMatchObject({ status: 500, json: { error: "internal_error", detail: expect.stringMatching(/error id/) } });
    expect(res.text).not.toContain("D1_ERROR");
    // The name is free: the create goes through once D1 does.
    expect((await fetchWithD1(env.DB, "/admin/engines", { method: "POST", body: JSON.stringify({ name }) })).status).toBe(201);
  });

  it("starting a run: once its start is queued for the agent, the answer is the run, whatever D1 says next", async () => {
    fixRunsClock();
    const e = await createEngine("d1-run");
    await runsAs(e, "trainer").reportCatalog(sampleCatalog());
    await runsAs(e, "operator").setLockedFields({ set: [{ section: "env", name: "max_token_length", value: 8192 }] });
    await runsAs(e, "operator").selectEnvironment({ name: "gsm8k" });
    const logged = vi.spyOn(console, "error").mockImplementation(() => undefined);
    // D1 fails on the write of the start command's seq, after the run's row and the agent's command.
    const res = await fetchWithD1(failingD1((sql) => /update "runs" set "command_seq"/i.test(sql)), `/e/${e.name}/runs/start`, { method: "POST", body: "{}", token: e.tokens.operator });
    logged.mockRestore();
    expect(res).toMatchObject({ status: 200, json: { status: "pending", environment: "gsm8k", processes: [] } });
    const runId = (res.json as { run_id: string }).run_id;
    expect((await runsAs(e, "viewer").listRuns()).active_run_id).toBe(runId);
    const { commands } = await e.as("trainer").pollCommands();
    expect(commands.map((c) => c.body)).toContainEqual(expect.objectContaining({ kind: "start_run", run_id: runId }));
  });

  it("an MCP batch: the request D1 failed is answered its own JSON-RPC internal error, the others as they went", async () => {
    fixRunsClock();
    const e = await createEngine("d1-mcp");
    await runsAs(e, "trainer").reportCatalog(sampleCatalog());
    await runsAs(e, "operator").selectEnvironment({ name: "gsm8k" });
    const batch = [
      { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "rl_edit_config", arguments: { field: "group_size", value: 4 } } },
      { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "rl_list_runs", arguments: {} } },
    ];
    const logged = vi.spyOn(console, "error").mockImplementation(() => undefined);
    // Listing runs reads the runs table with a LIMIT; the edit before it does not.
    const res = await fetchWithD1(failingD1((sql) => /from "runs"/i.test(sql) && /limit/i.test(sql)), `/e/${e.name}/mcp`, {
      method: "POST",
      body: JSON.stringify(batch),
      token: e.tokens.operator,
      headers: { accept: "application/json, text/event-stream" },
    });
    logged.mockRestore();
    expect(res.status).toBe(200);
    expect(res.json).toEqual([
      { jsonrpc: "2.0", id: 1, result: expect.anything() },
      { jsonrpc: "2.0", id: 2, error: { code: -32603, message: expect.stringMatching(/^Internal error \(error id [^)]+\); try again\.$/) } },
    ]);
    expect(res.text).not.toContain("D1_ERROR");
    expect(((await runsAs(e, "viewer").getConfig()) as unknown as { edits: Record<string, unknown> }).edits).toMatchObject({ group_size: 4 });
  });
});
