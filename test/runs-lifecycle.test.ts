/**
 * The run lifecycle through the real Worker, D1 and the engine's command channel: start
 * (queued for the agent), the agent's reports, stop, crash, completion, results, and every
 * refusal: starting while a run is active (also as a race), unknown runs, bad reports.
 */
import { env } from "cloudflare:workers";
import { drizzle } from "drizzle-orm/d1";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { z } from "zod";
import type { ProcessReport } from "../src/protocol/runs";
import { runsClock } from "../src/runs/clock";
import { changeRun } from "../src/runs/run-store";
import { createEngine, raw, type TestEngine } from "./support/harness";
import { fixRunsClock, refusal, runsAs, sampleCatalog } from "./support/runs";

let e: TestEngine;
let clock: ReturnType<typeof fixRunsClock>;
const realNow = runsClock.now;

beforeEach(async () => {
  e = await createEngine("runs-life");
  clock = fixRunsClock();
  await runsAs(e, "trainer").reportCatalog(sampleCatalog());
  await runsAs(e, "operator").setLockedFields({ set: [{ section: "env", name: "max_token_length", value: 8192 }] });
  await runsAs(e, "operator").selectEnvironment({ name: "gsm8k" });
});

afterEach(() => {
  runsClock.now = realNow;
});

const T0 = Date.UTC(2026, 10, 30, 12, 0, 0) / 1000;

function proc(name: string, order: number, state: ProcessReport["state"], extra: Partial<z.input<typeof ProcessReport>> = {}): z.input<typeof ProcessReport> {
  return { name, order, state, pid: 1000 + order, command: `${name} --config /tmp/run.yaml`, log_path: `/var/log/runs/${name}.log`, ...extra };
}

async function startedRun(): Promise<string> {
  const run = await runsAs(e, "operator").startRun();
  return run.run_id;
}

describe("starting a run", () => {
  it("records the run as pending and queues start_run with the rendered YAML and the environment's file", async () => {
    await runsAs(e, "operator").editConfig("group_size", 4);
    const run = await runsAs(e, "operator").startRun({ environment: "gsm8k" });
    expect(run).toMatchObject({ status: "pending", environment: "gsm8k", created_at: T0, started_at: null, running_time_seconds: null, processes: [], edits: { group_size: 4 } });
    expect(run.run_id).toMatch(/^run_[a-z0-9]{10}$/);
    expect(run.config_yaml).toContain("group_size: 4\n  max_token_length: 8192\n");
    const { commands } = await e.as("trainer").pollCommands();
    expect(commands.map((c) => c.body)).toEqual([
      { kind: "start_run", run_id: run.run_id, environment: { name: "gsm8k", class_name: "GSM8kEnv", file_path: "/opt/envs/gsm8k_server.py" }, config_yaml: run.config_yaml },
    ]);
    expect(run.command_seq).toBe(commands[0]!.seq);
    // Later edits do not change a run that was already started.
    await runsAs(e, "operator").editConfig("group_size", 32);
    expect((await runsAs(e, "viewer").runResults(run.run_id)).config_yaml).toBe(run.config_yaml);
  });

  it("refuses a second start while a run is active, naming the active run, and records nothing", async () => {
    const first = await startedRun();
    const r = await refusal(() => runsAs(e, "operator").startRun());
    expect([r.status, r.code]).toEqual([409, "run_active"]);
    expect(r.hints).toEqual({ active_run_id: first, active_status: "pending" });
    const list = await runsAs(e, "viewer").listRuns();
    expect(list.runs.map((x) => x.run_id)).toEqual([first]);
    expect(list.active_run_id).toBe(first);
    const { commands } = await e.as("trainer").pollCommands();
    expect(commands).toHaveLength(1);
  });

  it("lets exactly one of many concurrent starts through (D1's unique index decides)", async () => {
    const results = await Promise.allSettled(Array.from({ length: 6 }, () => runsAs(e, "operator").startRun()));
    const won = results.filter((r) => r.status === "fulfilled");
    expect(won).toHaveLength(1);
    for (const r of results) if (r.status === "rejected") expect((r.reason as { code: string }).code).toBe("run_active");
    expect((await runsAs(e, "viewer").listRuns()).count).toBe(1);
  });

  it("refuses without a selection, for another environment than the selected one, and for other roles", async () => {
    const other = await createEngine("runs-life-empty");
    expect((await refusal(() => runsAs(other, "operator").startRun())).code).toBe("no_environment_selected");
    const mismatch = await refusal(() => runsAs(e, "operator").startRun({ environment: "countdown" }));
    expect([mismatch.status, mismatch.code, mismatch.hints["selected"]]).toEqual([409, "environment_mismatch", "gsm8k"]);
    for (const role of ["viewer", "client", "trainer"] as const) expect((await refusal(() => runsAs(e, role).startRun())).status).toBe(403);
    const badBody = await raw(`/e/${e.name}/runs/start`, { token: e.tokens.operator, body: JSON.stringify({ environment: 5 }) });
    expect(badBody.status).toBe(422);
    expect((await runsAs(e, "viewer").listRuns()).count).toBe(0);
  });

  it("refuses when the selected environment was dropped by a rescan, or an edit no longer fits", async () => {
    await runsAs(e, "operator").editConfig("group_size", 4);
    // The environment's author changed group_size to a string.
    const changed = sampleCatalog();
    changed.environments[0]!.fields = changed.environments[0]!.fields!.map((f) => (f.name === "group_size" ? { ...f, type: "str" } : f));
    await runsAs(e, "trainer").reportCatalog(changed);
    const stale = await refusal(() => runsAs(e, "operator").startRun());
    expect([stale.status, stale.code, stale.hints["stale_edits"]]).toEqual([409, "stale_edits", ["group_size"]]);
    await runsAs(e, "trainer").reportCatalog(sampleCatalog({ environments: [sampleCatalog().environments[1]!] }));
    const gone = await refusal(() => runsAs(e, "operator").startRun());
    expect([gone.status, gone.code]).toEqual([404, "unknown_environment"]);
    expect((await runsAs(e, "viewer").listRuns()).count).toBe(0);
  });

  it("starts with an edit that a lock now overrides, and says so", async () => {
    await runsAs(e, "operator").editConfig("temperature", 0.5);
    await runsAs(e, "operator").setLockedFields({ set: [{ section: "env", name: "temperature", value: 1.0 }] });
    const run = await runsAs(e, "operator").startRun();
    expect(run.overridden_edits).toEqual(["temperature"]);
    expect(run.config_yaml).toContain("temperature: 1\n");
  });
});

describe("the agent's reports", () => {
  it("move a run through starting to running, with processes, running time and metrics", async () => {
    const id = await startedRun();
    const agent = runsAs(e, "trainer");
    clock.advance(1000);
    expect(await agent.reportRun(id, { status: "starting", detail: "waiting for api to open port 8000", processes: [proc("api", 0, "starting"), proc("trainer", 1, "pending")] })).toEqual({
      run_id: id,
      status: "starting",
      must_stop: false,
    });
    let s = await runsAs(e, "viewer").runStatus(id);
    expect(s).toMatchObject({ status: "starting", detail: "waiting for api to open port 8000", started_at: null });
    expect(s.processes.map((p) => [p.name, p.state])).toEqual([
      ["api", "starting"],
      ["trainer", "pending"],
    ]);
    clock.advance(4000);
    await agent.reportRun(id, { status: "running", processes: [proc("api", 0, "ready", { ready_at: T0 + 2 }), proc("trainer", 1, "ready")], agent_id: "gpu-host-1" });
    clock.advance(90_000);
    await agent.reportRun(id, {
      status: "running",
      metrics: [
        { index: 0, step: 1, at: T0 + 30, values: { "train/reward_mean": 0.1 } },
        { index: 1, step: 2, at: T0 + 60, values: { "train/reward_mean": 0.25, "train/percent_correct": 0.3 } },
      ],
    });
    s = await runsAs(e, "viewer").runStatus(id);
    expect(s).toMatchObject({ status: "running", started_at: T0 + 5, running_time_seconds: 90 });
    expect(s.processes.find((p) => p.name === "api")).toMatchObject({ state: "ready", pid: 1000, ready_at: T0 + 2, log_path: "/var/log/runs/api.log" });
    expect(s.metrics).toEqual({ index: 1, step: 2, at: T0 + 60, values: { "train/reward_mean": 0.25, "train/percent_correct": 0.3 } });
    // A late "starting" does not move the run back, and a report sent twice stores each metric once.
    await agent.reportRun(id, { status: "starting", metrics: [{ index: 1, step: 2, at: T0 + 60, values: { "train/reward_mean": 0.25 } }] });
    const res = await runsAs(e, "viewer").runResults(id);
    expect(res.status).toBe("running");
    expect(res.metrics_history.map((m) => m.index)).toEqual([0, 1]);
    expect(res.events.map((ev) => ev.kind)).toEqual(["created", "starting", "running"]);
  });

  it("marks a crashed run failed with the exit code and the last log lines; a new run may then start", async () => {
    const id = await startedRun();
    const agent = runsAs(e, "trainer");
    await agent.reportRun(id, { status: "running", processes: [proc("api", 0, "ready"), proc("trainer", 1, "ready")] });
    clock.advance(60_000);
    const tail = "Traceback (most recent call last):\nRuntimeError: CUDA out of memory";
    await agent.reportRun(id, {
      status: "failed",
      detail: "trainer exited with code 1; stopped api",
      processes: [proc("api", 0, "stopped", { signal: "SIGTERM" }), proc("trainer", 1, "exited", { exit_code: 1, log_tail: tail, ended_at: T0 + 60 })],
    });
    const res = await runsAs(e, "viewer").runResults(id);
    expect(res).toMatchObject({ status: "failed", detail: "trainer exited with code 1; stopped api", ended_at: T0 + 60, running_time_seconds: 60 });
    expect(res.processes.find((p) => p.name === "trainer")).toMatchObject({ state: "exited", exit_code: 1, log_tail: tail });
    expect(res.events.at(-1)).toMatchObject({ kind: "failed", detail: "running -> failed: trainer exited with code 1; stopped api" });
    // Over is over: a later "running" from a confused agent changes nothing and is told to stop.
    expect(await agent.reportRun(id, { status: "running" })).toEqual({ run_id: id, status: "failed", must_stop: true });
    const next = await runsAs(e, "operator").startRun();
    expect(next.status).toBe("pending");
  });

  it("marks a run whose processes all finished cleanly completed", async () => {
    const id = await startedRun();
    await runsAs(e, "trainer").reportRun(id, { status: "running" });
    await runsAs(e, "trainer").reportRun(id, { status: "completed", detail: "env exited with code 0", processes: [proc("env", 2, "exited", { exit_code: 0 })] });
    expect((await runsAs(e, "viewer").runStatus(id)).status).toBe("completed");
    expect((await runsAs(e, "viewer").listRuns()).active_run_id).toBeNull();
  });

  it("never writes a change decided from a status that another request changed meanwhile, nor its event", async () => {
    const id = await startedRun();
    await runsAs(e, "trainer").reportRun(id, { status: "starting" });
    await runsAs(e, "operator").stopRun(id, { force: true, reason: "host lost" });
    // What a "running" report read before the forced stop was written would then write:
    const stale = await changeRun(drizzle(env.DB), id, "starting", { status: "running", startedAt: clock.t, updatedAt: clock.t }, { at: clock.t, kind: "running", detail: "starting -> running" });
    expect(stale).toBe(false);
    const res = await runsAs(e, "viewer").runResults(id);
    expect([res.status, res.started_at, res.events.map((ev) => ev.kind)]).toEqual(["stopped", null, ["created", "starting", "stop_forced"]]);
    await startedRun();
  });

  it("refuses reports of unknown runs, malformed ids and bad shapes, and from roles other than the trainer", async () => {
    const id = await startedRun();
    const agent = runsAs(e, "trainer");
    expect((await refusal(() => agent.reportRun("run_doesnotexist", { status: "running" }))).code).toBe("unknown_run");
    const malformed = await raw(`/e/${e.name}/runs/agent/runs/not-a-run`, { token: e.tokens.trainer, body: JSON.stringify({ status: "running" }) });
    expect(malformed.status).toBe(404);
    const badState = await raw(`/e/${e.name}/runs/agent/runs/${id}`, { token: e.tokens.trainer, body: JSON.stringify({ status: "running", processes: [{ name: "api", order: 0, state: "dancing" }] }) });
    expect(badState.status).toBe(422);
    expect(badState.json?.["detail"]).toMatch(/processes\.0\.state/);
    const badStatus = await raw(`/e/${e.name}/runs/agent/runs/${id}`, { token: e.tokens.trainer, body: JSON.stringify({ status: "stopping" }) });
    expect(badStatus.status).toBe(422);
    const twice = await refusal(() => agent.reportRun(id, { status: "running", processes: [proc("api", 0, "ready"), proc("api", 1, "ready")] }));
    expect([twice.status, twice.detail]).toEqual([422, "processes: 'api' is listed twice."]);
    expect((await refusal(() => runsAs(e, "operator").reportRun(id, { status: "running" }))).status).toBe(403);
    // Made milliseconds, 1e308 seconds was Infinity, which D1 stored as null: a process "never started".
    for (const [field, at] of [["started_at", 1e308], ["ready_at", -1], ["ended_at", 1e300]] as const) {
      const badTime = await raw(`/e/${e.name}/runs/agent/runs/${id}`, { token: e.tokens.trainer, body: JSON.stringify({ status: "running", processes: [{ ...proc("api", 0, "ready"), [field]: at }] }) });
      expect([badTime.status, badTime.json?.["detail"]]).toEqual([422, expect.stringContaining(`processes.0.${field}`)]);
    }
    const s = await runsAs(e, "viewer").runStatus(id);
    expect([s.status, s.processes]).toEqual(["pending", []]);
  });

  it("gives a restarted agent its engine's active runs with their processes", async () => {
    const id = await startedRun();
    await runsAs(e, "trainer").reportRun(id, { status: "running", processes: [proc("api", 0, "ready"), proc("trainer", 1, "ready")] });
    const { runs } = await runsAs(e, "trainer").activeRuns();
    expect(runs).toHaveLength(1);
    expect(runs[0]).toMatchObject({ run_id: id, status: "running", environment_file: "/opt/envs/gsm8k_server.py" });
    expect(runs[0]!.processes.map((p) => [p.name, p.pid])).toEqual([
      ["api", 1000],
      ["trainer", 1001],
    ]);
    expect(runs[0]!.config_yaml).toContain("env:");
    expect((await refusal(() => runsAs(e, "viewer").activeRuns())).status).toBe(403);
  });

  it("keep an ended run's processes as it ended (exit code, last lines) when an earlier report lands late", async () => {
    // A report the agent sent while the run ran, retried after a timeout, landed after the one
    // that ended it and put every process back to ready: no exit code, no last lines.
    const run = await runsAs(e, "operator").startRun();
    const agent = runsAs(e, "trainer");
    await agent.reportRun(run.run_id, { status: "running", processes: [proc("api", 0, "ready"), proc("trainer", 1, "ready")] });
    clock.advance(60_000);
    const tail = "Traceback (most recent call last):\nRuntimeError: CUDA out of memory";
    await agent.reportRun(run.run_id, {
      status: "failed",
      detail: "trainer exited with code 1; stopped api",
      processes: [proc("api", 0, "stopped", { signal: "SIGTERM" }), proc("trainer", 1, "exited", { exit_code: 1, log_tail: tail, ended_at: T0 + 60 })],
    });
    // The earlier "running" report, retried after a timeout, lands now.
    const late = await agent.reportRun(run.run_id, { status: "running", processes: [proc("api", 0, "ready"), proc("trainer", 1, "ready")] });
    expect(late).toEqual({ run_id: run.run_id, status: "failed", must_stop: true });
    const res = await runsAs(e, "viewer").runResults(run.run_id);
    expect(res.status).toBe("failed");
    expect(res.processes.find((p) => p.name === "trainer")).toMatchObject({ state: "exited", exit_code: 1, log_tail: tail });
    expect(res.processes.find((p) => p.name === "api")).toMatchObject({ state: "stopped", signal: "SIGTERM" });
  });
});

describe("stopping a run", () => {
  it("moves a running run to stopping, queues stop_run, and ends stopped when the agent says so", async () => {
    const id = await startedRun();
    const agent = runsAs(e, "trainer");
    await agent.reportRun(id, { status: "running" });
    await e.as("trainer").pollCommands();
    const stop = await runsAs(e, "operator").stopRun(id, { reason: "loss diverged" });
    expect(stop).toMatchObject({ status: "stopping", stop_requested: true, message: expect.stringMatching(/reverse order/) });
    const { commands } = await e.as("trainer").pollCommands();
    expect(commands.map((c) => c.body)).toEqual([{ kind: "stop_run", run_id: id, reason: "loss diverged" }]);
    // A report that crossed the stop keeps the run stopping and tells the agent to stop.
    expect(await agent.reportRun(id, { status: "running" })).toEqual({ run_id: id, status: "stopping", must_stop: true });
    // Stopping twice is harmless and queues nothing more.
    expect((await runsAs(e, "operator").stopRun(id)).message).toMatch(/already stopping/);
    clock.advance(12_000);
    await agent.reportRun(id, { status: "stopped", detail: "stopped env, trainer, api", processes: [proc("env", 2, "stopped"), proc("trainer", 1, "stopped", { signal: "SIGKILL", detail: "ignored SIGTERM for 10 s" })] });
    const res = await runsAs(e, "viewer").runResults(id);
    expect(res).toMatchObject({ status: "stopped", ended_at: T0 + 12 });
    expect(res.events.map((ev) => ev.kind)).toEqual(["created", "running", "stop_requested", "stopped"]);
    expect((await e.as("trainer").pollCommands()).commands).toEqual([]);
    expect((await runsAs(e, "operator").stopRun(id)).message).toMatch(/already stopped/);
  });

  it("stops a run that has not started at once; the agent then learns it must not start it", async () => {
    const id = await startedRun();
    const stop = await runsAs(e, "operator").stopRun(id);
    expect(stop.status).toBe("stopped");
    expect(await runsAs(e, "trainer").reportRun(id, { status: "starting" })).toEqual({ run_id: id, status: "stopped", must_stop: true });
    const { commands } = await e.as("trainer").pollCommands();
    expect(commands.map((c) => c.body.kind)).toEqual(["start_run", "stop_run"]);
  });

  it("force-stops a run whose agent is gone; the agent is told to stop when it comes back", async () => {
    const id = await startedRun();
    await runsAs(e, "trainer").reportRun(id, { status: "running" });
    const stop = await runsAs(e, "operator").stopRun(id, { force: true, reason: "host lost" });
    expect(stop).toMatchObject({ status: "stopped", detail: "stopped (forced): host lost" });
    expect(await runsAs(e, "trainer").reportRun(id, { status: "running" })).toMatchObject({ status: "stopped", must_stop: true });
    expect((await runsAs(e, "viewer").runResults(id)).events.map((ev) => ev.kind)).toEqual(["created", "running", "stop_forced"]);
  });

  it("leaves a run that completed while its stop was on the way completed, and the engine free", async () => {
    const id = await startedRun();
    await runsAs(e, "trainer").reportRun(id, { status: "running" });
    // In either order the run ends completed: stop then report (stopping -> completed), or report then stop (already completed).
    await Promise.all([runsAs(e, "operator").stopRun(id, { reason: "enough" }), runsAs(e, "trainer").reportRun(id, { status: "completed", detail: "env exited with code 0" })]);
    const s = await runsAs(e, "viewer").runStatus(id);
    expect({ status: s.status, ended: s.ended_at !== null }).toEqual({ status: "completed", ended: true });
    expect((await runsAs(e, "viewer").listRuns()).active_run_id).toBeNull();
    // The events are the changes made: the stop's only if it came first.
    const kinds = (await runsAs(e, "viewer").runResults(id)).events.map((ev) => ev.kind);
    expect([
      ["created", "running", "stop_requested", "completed"],
      ["created", "running", "completed"],
    ]).toContainEqual(kinds);
    await startedRun();
  });

  it("refuses unknown runs and other roles", async () => {
    const id = await startedRun();
    expect((await refusal(() => runsAs(e, "operator").stopRun("run_nope1234"))).status).toBe(404);
    expect((await refusal(() => runsAs(e, "viewer").stopRun(id))).status).toBe(403);
    expect((await refusal(() => runsAs(e, "client").stopRun(id))).status).toBe(403);
    const badBody = await raw(`/e/${e.name}/runs/${id}/stop`, { token: e.tokens.operator, body: JSON.stringify({ force: "yes" }) });
    expect(badBody.status).toBe(422);
    expect((await runsAs(e, "viewer").runStatus(id)).status).toBe("pending");
  });
});

describe("listing runs", () => {
  it("lists newest first and pages with before", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const id = await startedRun();
      ids.push(id);
      await runsAs(e, "operator").stopRun(id);
      clock.advance(1000);
    }
    const all = await runsAs(e, "viewer").listRuns();
    expect(all.runs.map((r) => r.run_id)).toEqual([...ids].reverse());
    const page = await runsAs(e, "viewer").listRuns({ limit: 1, before: ids[2] });
    expect(page.runs.map((r) => r.run_id)).toEqual([ids[1]]);
    expect((await refusal(() => runsAs(e, "viewer").listRuns({ before: "run_unknown1" }))).status).toBe(404);
    expect((await raw(`/e/${e.name}/runs?limit=0`, { token: e.tokens.viewer })).status).toBe(422);
    expect((await raw(`/e/${e.name}/runs/run_unknown1`, { token: e.tokens.viewer })).status).toBe(404);
  });

  it("keeps runs created in the same millisecond in creation order, pages past none of them, and picks the last as the latest", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const id = await startedRun();
      ids.push(id);
      await runsAs(e, "operator").stopRun(id); // pending -> stopped at once, so the next may start
    }
    const newestFirst = [...ids].reverse();
    expect((await runsAs(e, "viewer").listRuns()).runs.map((r) => r.run_id)).toEqual(newestFirst);
    const seen: string[] = [];
    let before: string | undefined;
    for (let page = 0; page < 5; page++) {
      const p = await runsAs(e, "viewer").listRuns({ limit: 1, ...(before === undefined ? {} : { before }) });
      if (p.runs.length === 0) break;
      seen.push(...p.runs.map((r) => r.run_id));
      before = p.runs.at(-1)!.run_id;
    }
    expect(seen).toEqual(newestFirst);
    // With no run named and none active, an agent's tools act on the latest run.
    const status = await raw(`/e/${e.name}/mcp`, { token: e.tokens.viewer, body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "rl_check_status", arguments: {} } }) });
    expect((status.json?.["result"] as { structuredContent: { run_id: string } }).structuredContent.run_id).toBe(ids[2]);
  });
});
