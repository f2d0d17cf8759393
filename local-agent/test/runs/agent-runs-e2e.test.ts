/**
 * Training runs end to end: the real agent (its command loop and dispatcher) against the real
 * Worker on Miniflare, with real processes and real Python. The agent scans the fixture
 * environments and reports them; an operator selects, edits and starts a run; the agent starts
 * its processes in order and reports them; the agent is restarted and reattaches; the run is
 * stopped; an inference test runs the environment's process mode against a local model. Behind
 * a proxy that answers 503 once, the catalog and an inference test's results still get there.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RunsClient } from "../../../src/client";
import { startAgent, type RunningAgent } from "../../src/agent";
import { realClock } from "../../src/clock";
import { lineLogger } from "../../src/log";
import { groupAlive } from "../../src/runs/process-group";
import { loadRunsConfig } from "../../src/runs/run-commands";
import { parseRunsConfig } from "../../src/runs/runs-config";
import { testConfig } from "../support/agent-harness";
import { startTestExchange, type TestEngine, type TestExchange } from "../support/exchange";
import { FaultyProxy } from "../support/proxy";
import { tempDir } from "../support/temp";
import { waitUntil } from "../support/wait";
import { ENVS, PROC, freePort } from "./support";

let ex: TestExchange;
let engine: TestEngine;
let model: Server;
let modelUrl: string;
const dir = tempDir();
const lines: string[] = [];

beforeAll(async () => {
  // A short lease: the stopped agent's abandoned long poll may lease the next command, which the
  // engine hands out again only after the lease (60 s by default).
  ex = await startTestExchange({ commandLeaseSeconds: 4 });
  engine = await ex.newEngine();
  model = createServer((req, res) => {
    let body = "";
    req.on("data", (d: Buffer) => (body += d.toString()));
    req.on("end", () => {
      const [, a, b] = /What is (\d+) \+ (\d+)\?/.exec(body) ?? [];
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ choices: [{ message: { content: String(Number(a) + Number(b)) } }] }));
    });
  });
  await new Promise<void>((r) => model.listen(0, "127.0.0.1", r));
  modelUrl = `http://127.0.0.1:${(model.address() as AddressInfo).port}/v1`;
});

afterAll(async () => {
  if (process.env["AGENT_TEST_LOG"]) process.stderr.write(lines.join("\n"));
  model?.close();
  await ex?.stop();
  dir.remove();
});

async function agent(apiPort: number, trainerPort: number): Promise<RunningAgent> {
  const config = testConfig(ex.url, engine, dir.path);
  const runsConfig = parseRunsConfig(
    {
      environmentDirs: [ENVS],
      workDir: ENVS,
      pollSeconds: 0.1,
      stopGraceSeconds: 2,
      // slow_import_env.py hangs at import: cut it off quickly.
      importTimeoutSeconds: 2,
      processes: [
        { name: "api", command: `python3 ${PROC} --listen ${apiPort}`, env: { PROC_NAME: "api" }, ready: { port: apiPort } },
        { name: "trainer", command: `python3 ${PROC} --http ${trainerPort} --metrics 2`, env: { PROC_NAME: "trainer" }, ready: { http: `http://127.0.0.1:${trainerPort}/` } },
        { name: "env", command: `python3 ${PROC} --say "{env_name} {env_class} {config}"`, env: { PROC_NAME: "env" } },
      ],
    },
    dir.path,
    config.stateDir,
  );
  return startAgent(config, lineLogger((l) => lines.push(l), realClock), realClock, { runsConfig: parsed(runsConfig) });
}

function parsed<T>(r: { ok: true; config: T } | { ok: false; errors: string[] }): { ok: true; config: T } {
  if (!r.ok) throw new Error(r.errors.join("; "));
  return r;
}

const as = (role: keyof TestEngine["tokens"]) => new RunsClient({ baseUrl: engine.baseUrl, token: engine.tokens[role] });

describe("training runs through the agent", () => {
  // Real processes, Python and a local Worker: generous deadlines for a loaded 2-core machine.
  it("scans, starts in order, survives an agent restart, stops, and tests inference", { timeout: 240_000 }, async () => {
    const [apiPort, trainerPort] = [await freePort(), await freePort()];
    let a = await agent(apiPort, trainerPort);
    try {
      // The agent reports its catalog when it starts.
      const cat = await waitUntil(async () => {
        const c = await as("viewer").listEnvironments();
        return c.count === 4 ? c : null;
      }, "the agent's catalog", 60_000);
      // Imported when Python is quick enough (scanner.test.ts covers the import itself), else read from the source.
      expect(cat.environments.find((e) => e.name === "gsm8k")).toMatchObject({ config_class: "GSM8kConfig", fields: expect.arrayContaining([expect.objectContaining({ name: "temperature" })]) });
      expect(cat.problems.map((p) => p.file_path)).toEqual([join(ENVS, "broken_env.py")]);
      expect(cat.catalog_status.state).toBe("ready");

      const op = as("operator");
      await op.setLockedFields({ set: [{ section: "env", name: "max_token_length", value: 8192 }] });
      await op.selectEnvironment({ name: "gsm8k" });
      await op.editConfig("group_size", 4);
      const run = await op.startRun();

      const running = await waitUntil(async () => {
        const s = await as("viewer").runStatus(run.run_id);
        return s.status === "running" && s.metrics?.index === 1 ? s : null;
      }, "the run to be running with its metrics", 60_000);
      expect(running.processes.map((p) => [p.name, p.state])).toEqual([
        ["api", "ready"],
        ["trainer", "ready"],
        ["env", "ready"],
      ]);
      expect(running.metrics?.values).toEqual({ "train/reward_mean": 0.2 });
      const pids = running.processes.map((p) => p.pid as number);

      // The agent goes away and comes back: the run's processes stay, and the new agent adopts them.
      await a.stop();
      for (const pid of pids) expect(groupAlive(pid)).toBe(true);
      a = await agent(apiPort, trainerPort);
      await waitUntil(async () => (await as("viewer").runResults(run.run_id)).detail === "reattached after an agent restart", "the new agent to reattach", 60_000);
      expect(a.runs.supervisor?.current).toEqual({ run_id: run.run_id, phase: "running" });

      const stop = await op.stopRun(run.run_id, { reason: "enough for today" });
      expect(stop.status).toBe("stopping");
      const stopped = await waitUntil(async () => {
        const r = await as("viewer").runResults(run.run_id);
        return r.status === "stopped" ? r : null;
      }, "the run to be stopped", 60_000);
      expect(stopped.processes.map((p) => p.state)).toEqual(["stopped", "stopped", "stopped"]);
      expect(stopped.processes.find((p) => p.name === "env")?.log_tail).toContain(`gsm8k GSM8kEnv ${join(dir.path, "state", "runs", run.run_id, "config.yaml")}`);
      expect(stopped.events.map((e) => e.kind)).toEqual(["created", "starting", "running", "stop_requested", "stopped"]);
      for (const pid of pids) expect(groupAlive(pid)).toBe(false);

      // An inference test of the selected environment, answered by a local model.
      const test = await op.startInferenceTest({ models: [{ model: "tiny", base_url: modelUrl }], num_steps: 2, group_size: 2, timeout_seconds: 30 });
      const done = await waitUntil(async () => {
        const t = await as("viewer").inferenceTest(test.test_id);
        return t.status === "done" ? t : null;
      }, "the inference test's results", 60_000);
      expect(done.models[0]).toMatchObject({ model: "tiny", steps_tested: 2, total_completions: 4, accuracy: 1 });
      expect(done.summary).toMatchObject({ best_model: "tiny", environment_working: true });
    } finally {
      await a.stop();
    }
  });
});

describe("an agent without a runs config", () => {
  it("tells the catalog's callers why it is empty, and its refusal of a scan reaches the engine's overview", async () => {
    const bare = await ex.newEngine();
    const here = tempDir();
    const runs = (role: keyof TestEngine["tokens"]) => new RunsClient({ baseUrl: bare.baseUrl, token: bare.tokens[role] });
    expect((await runs("viewer").listEnvironments()).catalog_status.state).toBe("no_agent");
    const config = testConfig(ex.url, bare, here.path);
    // What the CLI loads on a host where ROLLOUT_RUNS_CONFIG is not set.
    const off = loadRunsConfig({}, here.path, config.stateDir);
    const a = await startAgent(config, lineLogger((l) => lines.push(l), realClock), realClock, { runsConfig: off });
    try {
      const status = await waitUntil(async () => {
        const s = (await runs("viewer").listEnvironments()).catalog_status;
        return s.state === "no_runs_config" ? s : null;
      }, "the catalog to say the host has no runs config");
      expect(status.detail).toContain("has training runs off: no runs config on this host (set ROLLOUT_RUNS_CONFIG to a JSON file");

      const scan = await runs("operator").scanEnvironments();
      const refusal = await waitUntil(async () => (await bare.viewer.overview()).refusals.find((r) => r.seq === scan.command_seq), "the agent's refusal in the overview");
      expect(refusal).toMatchObject({ kind: "scan_environments", detail: expect.stringMatching(/^no runs config on this host/) });
    } finally {
      await a.stop();
      here.remove();
    }
  });
});

describe("when the Worker answers a report 503 once", () => {
  /** An agent with a runs config, on a fresh engine, reaching the Worker through a proxy the test can make fail. */
  async function behindProxy(): Promise<{ proxy: FaultyProxy; agent: RunningAgent; runs: (role: keyof TestEngine["tokens"]) => RunsClient; done: () => Promise<void> }> {
    const fresh = await ex.newEngine();
    const here = tempDir();
    const proxy = new FaultyProxy(ex.url);
    await proxy.listen();
    const config = testConfig(proxy.url, fresh, here.path);
    const runsConfig = parseRunsConfig(
      { environmentDirs: [ENVS], workDir: ENVS, pollSeconds: 0.1, importTimeoutSeconds: 2, processes: [{ name: "p", command: `python3 ${PROC}` }] },
      here.path,
      config.stateDir,
    );
    const agent = await startAgent(config, lineLogger((l) => lines.push(l), realClock), realClock, { runsConfig: parsed(runsConfig) });
    return {
      proxy,
      agent,
      runs: (role) => new RunsClient({ baseUrl: fresh.baseUrl, token: fresh.tokens[role] }),
      done: async () => {
        await agent.stop();
        await proxy.close();
        here.remove();
      },
    };
  }

  it("the catalog of the scan at the agent's start still reaches the exchange", { timeout: 120_000 }, async () => {
    let catalogTries = 0;
    const t = await behindProxy();
    try {
      t.proxy.fault = (path) => (path.endsWith("/runs/agent/catalog") && ++catalogTries === 1 ? "503" : "pass");
      const got = await waitUntil(async () => {
        const c = await t.runs("viewer").listEnvironments();
        return c.catalog_status.state === "ready" ? c : null;
      }, "the catalog to reach the exchange", 60_000);
      expect({ tries: catalogTries, environments: got.count }).toEqual({ tries: 2, environments: 4 });
    } finally {
      await t.done();
    }
  });

  it("an inference test's results still reach the exchange, without testing the models again", { timeout: 180_000 }, async () => {
    const t = await behindProxy();
    try {
      const reports: string[] = [];
      let doneRefused = 0;
      t.proxy.hold = (path, phase, body) => {
        if (phase === "request" && path.includes("/runs/agent/inference_tests/")) reports.push(String((JSON.parse(body.toString()) as { status: string }).status));
      };
      await waitUntil(async () => (await t.runs("viewer").listEnvironments()).catalog_status.state === "ready", "the catalog", 60_000);
      await t.runs("operator").selectEnvironment({ name: "gsm8k" });
      // The proxy decides before it reads the body: after the one "running" report of the one model, the next report is the results.
      t.proxy.fault = (path) => {
        if (!path.includes("/runs/agent/inference_tests/")) return "pass";
        if (reports.includes("running") && doneRefused === 0) {
          doneRefused++;
          reports.push("done (refused 503)");
          return "503";
        }
        return "pass";
      };
      const test = await t.runs("operator").startInferenceTest({ models: [{ model: "tiny", base_url: modelUrl }], num_steps: 2, group_size: 2, timeout_seconds: 30 });
      const final = await waitUntil(async () => {
        const r = await t.runs("viewer").inferenceTest(test.test_id);
        return r.status === "done" ? r : null;
      }, "the inference test's results", 60_000);
      expect(final.models[0]).toMatchObject({ model: "tiny", steps_tested: 2, accuracy: 1 });
      // One "running" report: the model was tested once.
      expect(reports).toEqual(["running", "done (refused 503)", "done"]);
    } finally {
      await t.done();
    }
  });
});
