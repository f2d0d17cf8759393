/**
 * The run supervisor with real processes (the fixture script opens ports, serves HTTP, exits,
 * crashes, ignores SIGTERM). Deadlines and grace periods run on a manual clock where a test is
 * about them; elsewhere the real clock with short polls. Reports go to a recorder that answers
 * as the exchange's route does, or, where the exchange's request limit is the point, to the
 * real Worker on Miniflare.
 */
import { spawn } from "node:child_process";
import { appendFileSync, existsSync, readFileSync, readdirSync, renameSync, truncateSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { RunsClient } from "../../../src/client";
import { StartRunCommand, StopRunCommand, TestInferenceCommand } from "../../../src/protocol/commands";
import { AgentActiveRunsResponse } from "../../../src/protocol/runs";
import { realClock, type Clock } from "../../src/clock";
import { Reachability } from "../../src/reachability";
import { ExchangeReporter } from "../../src/runs/exchange-reporter";
import { MetricsReader } from "../../src/runs/metrics-reader";
import { RunSupervisor, type RunReporter } from "../../src/runs/run-supervisor";
import { readJournal, runDir, writeJournal } from "../../src/runs/run-journal";
import { groupAlive } from "../../src/runs/process-group";
import { startTestExchange, type TestExchange } from "../support/exchange";
import { ManualClock } from "../support/manual-clock";
import { MemoryLogger } from "../support/logger";
import { tempDir } from "../support/temp";
import { processAlive, processGroupOf, waitUntil } from "../support/wait";
import { RecordingReporter, freePort, killGroups, proc, reportedPids, runsConfig, startCommand } from "./support";
import { unwritable } from "../support/full-disk";

const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function setup(processes: unknown[], opts: { clock?: Clock; grace?: number } = {}) {
  const state = tempDir();
  const config = runsConfig({ processes, ...(opts.grace ? { stopGraceSeconds: opts.grace } : {}) }, state.path);
  const reporter = new RecordingReporter();
  const logger = new MemoryLogger();
  const stop = new AbortController();
  const sup = new RunSupervisor({ config, reporter, clock: opts.clock ?? realClock, logger, agentId: "host-1", stop: stop.signal });
  const pids = (): number[] => reportedPids(reporter);
  cleanups.push(() => {
    stop.abort();
    killGroups(pids());
    state.remove();
  });
  return { sup, reporter, logger, config, state, pids, stop };
}

const procsOf = (r: RecordingReporter, runId: string) => r.last(runId)?.processes ?? [];

/** The fixture's sleeping helpers (proc.py --helper) in the group `pgid` leads, from /proc. */
function sleepersIn(pgid: number): number[] {
  return readdirSync("/proc")
    .filter((n) => /^\d+$/.test(n))
    .map(Number)
    .filter((pid) => {
      try {
        return pid !== pgid && processGroupOf(pid) === pgid && readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("time.sleep(3600)");
      } catch {
        return false;
      }
    });
}

/** An active run as the exchange lists it, but for its id and status. */
const view = { environment: "gsm8k", detail: "", created_at: 0, started_at: 0, ended_at: null, running_time_seconds: 0, stop_requested: false, command_seq: 1, environment_file: "", config_yaml: "", processes: [] };

/** Moves the manual clock in steps of `stepMs`, letting real processes catch up in between, until `done()`. */
async function untilOnClock(clock: ManualClock, done: () => boolean, what: string, stepMs: number): Promise<void> {
  await waitUntil(
    async () => {
      if (done()) return true;
      await clock.advance(stepMs);
      await new Promise((r) => setTimeout(r, 10));
      return done();
    },
    what,
    45_000,
  );
}

describe("starting a run", () => {
  it("starts processes in order, each once ready (port, then HTTP 200, then none), with the run's config and logs", async () => {
    const [p1, p2] = [await freePort(), await freePort()];
    const { sup, reporter, config } = setup([
      proc("api", `--listen ${p1} --delay 0.3`, { ready: { port: p1 } }),
      proc("trainer", `--http ${p2} --delay 0.3`, { ready: { http: `http://127.0.0.1:${p2}/health` } }),
      proc("env", "--say serving"),
    ]);
    const out = await sup.start(startCommand("run_order1"));
    expect(out).toEqual({ ok: true, detail: expect.stringMatching(/starting run run_order1: api -> trainer -> env/) });
    await waitUntil(() => reporter.status.get("run_order1") === "running", "the run to be running");
    expect(reporter.statuses("run_order1")).toEqual(["starting", "starting", "starting", "starting", "running"]);
    const procs = procsOf(reporter, "run_order1");
    expect(procs.map((p) => [p.name, p.state])).toEqual([
      ["api", "ready"],
      ["trainer", "ready"],
      ["env", "ready"],
    ]);
    // Each started only after the one before was ready.
    expect(procs[1]!.started_at!).toBeGreaterThanOrEqual(procs[0]!.ready_at!);
    expect(procs[2]!.started_at!).toBeGreaterThanOrEqual(procs[1]!.ready_at!);
    const dir = join(config.runsDir, "run_order1");
    expect(readFileSync(join(dir, "config.yaml"), "utf8")).toBe("env:\n  group_size: 8\n");
    await waitUntil(() => readFileSync(join(dir, "env.log"), "utf8").includes("serving"), "env's output in its log");
    expect(readFileSync(join(dir, "api.log"), "utf8")).toMatch(new RegExp(`api up: pid \\d+ run run_order1 config ${dir}/config.yaml`));
    expect(readJournal(config.runsDir, "run_order1")?.processes.map((p) => p.name)).toEqual(["api", "trainer", "env"]);
    // The logs the agent rotates with trainer.log's: left alone, a chatty process filled the host's disk.
    expect(sup.logPaths).toEqual(["api", "trainer", "env"].map((n) => join(dir, `${n}.log`)));
    // A redelivered start does not start it twice; another run is refused while this one runs.
    expect(await sup.start(startCommand("run_order1"))).toMatchObject({ ok: true, detail: expect.stringMatching(/already running/) });
    expect(await sup.start(startCommand("run_other1"))).toMatchObject({ ok: false, detail: expect.stringMatching(/another run \(run_order1\)/) });
    expect(reporter.status.get("run_other1")).toBe("failed");
  });

  it("fails a run whose process exits during startup, with the code and its last lines, and stops the ones before it", async () => {
    const p1 = await freePort();
    const { sup, reporter, pids } = setup([proc("api", `--listen ${p1}`, { ready: { port: p1 } }), proc("trainer", "--say 'CUDA error: no device' --exit-after 0 --code 7", { ready: { port: 1 } })]);
    await sup.start(startCommand("run_crash1"));
    await sup.settled();
    const last = reporter.last("run_crash1")!;
    expect(last).toMatchObject({ status: "failed", detail: "trainer exited with code 7 while starting" });
    const trainer = last.processes!.find((p) => p.name === "trainer")!;
    expect(trainer).toMatchObject({ state: "exited", exit_code: 7 });
    expect(trainer.log_tail).toMatch(/CUDA error: no device\ntrainer exits with 7/);
    expect(last.processes!.find((p) => p.name === "api")).toMatchObject({ state: "stopped", detail: expect.stringMatching(/SIGTERM/) });
    for (const pid of pids()) expect(groupAlive(pid)).toBe(false);
    expect(sup.current).toBeNull();
  });

  it("fails a run whose process is not ready by its deadline (on the injected clock), stopping everything", async () => {
    const clock = new ManualClock();
    const p1 = await freePort();
    const { sup, reporter, pids } = setup([proc("api", `--listen ${p1}`, { ready: { port: p1 } }), proc("trainer", "", { ready: { port: 1 }, readyTimeoutSeconds: 30 })], { clock });
    await sup.start(startCommand("run_slow01"));
    // api becomes ready in real time; the trainer then waits for a port that never opens.
    // Its polls sleep on the manual clock: move it in small steps until the trainer is being waited for.
    await waitUntil(async () => {
      await clock.advance(50);
      await new Promise((r) => setTimeout(r, 10));
      return procsOf(reporter, "run_slow01").find((p) => p.name === "trainer")?.state === "starting" && clock.pending.length > 0;
    }, "the trainer to be waited for");
    await clock.advance(29_000);
    expect(reporter.status.get("run_slow01")).toBe("starting");
    // Past the deadline; then keep time moving so the stop's SIGTERM-to-SIGKILL waits can end.
    await clock.advance(1000);
    await untilOnClock(clock, () => sup.current === null, "the run to be over", 1000);
    expect(reporter.last("run_slow01")).toMatchObject({ status: "failed", detail: "trainer was not ready after 30 s (port 127.0.0.1:1 open never happened)" });
    for (const pid of pids()) expect(groupAlive(pid)).toBe(false);
  });

  it("fails plainly when a command does not exist, and starts nothing the exchange already stopped", async () => {
    const { sup, reporter } = setup([proc("api", ""), { name: "trainer", command: "/no/such/trainer --config {config}" }]);
    await sup.start(startCommand("run_nocmd1"));
    await sup.settled();
    expect(reporter.last("run_nocmd1")).toMatchObject({ status: "failed", detail: "trainer could not start: command not found: /no/such/trainer" });
    reporter.status.set("run_gone01", "stopped");
    expect(await sup.start(startCommand("run_gone01"))).toEqual({ ok: true, detail: "run run_gone01 was stopped before it started; nothing was started" });
    expect(reporter.last("run_gone01")?.processes?.every((p) => p.pid === null)).toBe(true);
  });
});

describe("a run's values from the exchange in a command that runs a shell script", () => {
  it("refuses a start whose environment a shell would read as syntax, and gives the values in the environment instead", async () => {
    // The catalog is posted with the trainer token: an environment named `x; touch <file>` in a
    // `sh -c '... {env_name} ...'` command ran on the host as the agent's user.
    const script = `sh -c 'echo env=$ROLLOUT_ENV_NAME file=$ROLLOUT_ENV_FILE class=$ROLLOUT_ENV_CLASS; echo name={env_name}; sleep 30'`;
    const { sup, reporter, config, state } = setup([{ name: "env", command: script }]);
    const pwned = join(state.path, "pwned");
    const bad = { ...startCommand("run_shell1"), environment: { name: `x; touch ${pwned}`, class_name: "GSM8kEnv", file_path: "/opt/envs/gsm8k_server.py" } };
    const refused = await sup.start(bad);
    expect(refused).toMatchObject({ ok: false, detail: expect.stringContaining(`{env_name} is "x; touch ${pwned}", sent by the exchange, and the command may run it as code`) });
    expect(refused?.detail).toContain('"$ROLLOUT_ENV_NAME"');
    expect(reporter.last("run_shell1")).toMatchObject({ status: "failed" });
    expect(existsSync(pwned)).toBe(false);
    // A plain one runs, and its processes read the values from their environment too.
    expect(await sup.start(startCommand("run_shell2"))).toMatchObject({ ok: true });
    const log = join(runDir(config.runsDir, "run_shell2"), "env.log");
    // The log's banner names the command; the output's lines begin with what they print.
    await waitUntil(() => existsSync(log) && /^name=/m.test(readFileSync(log, "utf8")), "the process's output");
    expect(readFileSync(log, "utf8")).toMatch(/^env=gsm8k file=\/opt\/envs\/gsm8k_server\.py class=GSM8kEnv\nname=gsm8k$/m);
    await sup.stop("run_shell2", "test over");
  });
});

describe("a run on a full disk", () => {
  // A start whose config.yaml could not be written threw: never answered, handed out again after each lease.
  it("refuses a start whose config.yaml cannot be written, saying why, and starts nothing", async () => {
    const { sup, reporter, config } = setup([proc("api", "")]);
    const configPath = join(runDir(config.runsDir, "run_full01"), "config.yaml");
    unwritable(configPath);
    const outcome = await sup.start(startCommand("run_full01"));
    expect(outcome?.ok).toBe(false);
    expect(outcome?.detail.startsWith(`cannot write ${configPath}: `), outcome?.detail).toBe(true);
    expect(reporter.last("run_full01")).toMatchObject({ status: "failed" });
    expect(reporter.last("run_full01")?.processes?.every((p) => p.pid === null) ?? true).toBe(true);
  });

  // A run that filled the disk with checkpoints ended, and the agent wrote run.json closed: the
  // write threw inside the run's task, which nobody awaits, and the agent process exited.
  it("ends a run whose note cannot be written as any other, with a warning, and takes the next start", async () => {
    const { sup, reporter, config, logger } = setup([proc("trainer", "--exit-after 0.3")]);
    const note = join(runDir(config.runsDir, "run_full02"), "run.json");
    unwritable(note);
    expect((await sup.start(startCommand("run_full02")))?.ok).toBe(true);
    await sup.settled();
    expect(reporter.last("run_full02")).toMatchObject({ status: "completed" });
    expect(logger.has(/^warn run run_full02: cannot write its note in .*an agent restarted meanwhile may not adopt or close its processes/)).toBe(true);
    // Not held as a run still going: the next one starts.
    const next = await sup.start(startCommand("run_full03"));
    expect(next?.ok, next?.detail).toBe(true);
    await sup.settled();
  });
});

describe("a running run", () => {
  it("fails when a process crashes, stopping the others in reverse order", async () => {
    const { sup, reporter, pids } = setup([proc("api", ""), proc("trainer", "--helper"), proc("env", "--exit-after 0.5 --code 3 --say 'Traceback: KeyError'")]);
    await sup.start(startCommand("run_later1"));
    await sup.settled();
    const last = reporter.last("run_later1")!;
    expect(last).toMatchObject({ status: "failed", detail: "env exited with code 3; the other processes were stopped" });
    expect(last.processes!.map((p) => [p.name, p.state])).toEqual([
      ["api", "stopped"],
      ["trainer", "stopped"],
      ["env", "exited"],
    ]);
    expect(last.processes![2]!.log_tail).toMatch(/Traceback: KeyError/);
    // Reverse order: the trainer ended before the api.
    expect(last.processes![1]!.ended_at!).toBeLessThanOrEqual(last.processes![0]!.ended_at!);
    // The trainer's helper (same process group) was stopped with it.
    for (const pid of pids()) expect(groupAlive(pid)).toBe(false);
  });

  it("stops what the process that ended the run left in its group, keeping how it ended", async () => {
    const { sup, reporter, config, pids } = setup([proc("api", ""), proc("env", "--helper --exit-after 0.5 --code 3")]);
    await sup.start(startCommand("run_helper1"));
    await sup.settled();
    const last = reporter.last("run_helper1")!;
    expect(last).toMatchObject({ status: "failed", detail: "env exited with code 3; the other processes were stopped" });
    // The env's helper, in the env's group, went with the run.
    expect(pids().filter((pid) => groupAlive(pid))).toEqual([]);
    expect(last.processes!.find((p) => p.name === "env")).toMatchObject({ state: "exited", exit_code: 3, detail: "exited with code 3; what it left in its group was stopped with SIGTERM" });
    expect(readJournal(config.runsDir, "run_helper1")?.closed).toBe(true);
  });

  it("settles when the agent stops while a run goes on: its processes outlive the agent, and nothing is left to wait for here", async () => {
    const { sup, reporter, stop } = setup([proc("trainer", "")]);
    await sup.start(startCommand("run_outlive"));
    await waitUntil(() => reporter.status.get("run_outlive") === "running", "the run to be running");
    stop.abort();
    // Before, settled() awaited the finished monitor again and again: a loop that never yielded to a timer.
    const timeout = new Promise<string>((r) => setTimeout(() => r("still waiting after 5 s"), 5_000).unref());
    expect(await Promise.race([sup.settled().then(() => "settled"), timeout])).toBe("settled");
    expect(sup.current?.run_id).toBe("run_outlive");
  });

  it("completes when a process finishes with exit code 0, and reports the metrics the run wrote", async () => {
    const { sup, reporter } = setup([proc("trainer", "--metrics 3 --exit-after 0.3")]);
    await sup.start(startCommand("run_done01"));
    await sup.settled();
    expect(reporter.last("run_done01")).toMatchObject({ status: "completed", detail: "trainer exited with code 0; the other processes were stopped" });
    const points = reporter.reports.filter((r) => r.runId === "run_done01").flatMap((r) => r.metrics ?? []);
    expect(points.map((p) => [p.index, p.step, p.values])).toEqual([
      [0, 1, { "train/reward_mean": 0.1 }],
      [1, 2, { "train/reward_mean": 0.2 }],
      [2, 3, { "train/reward_mean": 0.3 }],
    ]);
  });

  it("reports the metrics its process writes after truncating its metrics file", async () => {
    const clock = new ManualClock();
    // The run's one process: writes two lines, then (told by a flag file) starts its metrics afresh
    // with mode "w" and writes one line, as a trainer that restarts from a checkpoint does.
    const script = [
      'printf \'{"step":1,"loss":0.9}\\n{"step":2,"loss":0.8}\\n\' >> "$ROLLOUT_RUN_METRICS"',
      'while [ ! -e "$ROLLOUT_RUN_METRICS.go" ]; do sleep 0.02; done',
      'printf \'{"step":3,"loss":0.5}\\n\' > "$ROLLOUT_RUN_METRICS"',
      'touch "$ROLLOUT_RUN_METRICS.done"',
      "exec sleep 60",
    ].join("\n");
    const { sup, reporter, config } = setup([{ name: "trainer", command: `sh -c '${script.replace(/'/g, `'\\''`)}'` }], { clock });
    const steps = (): Array<number | null> => reporter.reports.filter((r) => r.runId === "run_trunc1").flatMap((r) => (r.metrics ?? []).map((m) => m.step ?? null));
    await sup.start(startCommand("run_trunc1"));
    await untilOnClock(clock, () => steps().length >= 2, "the first two points to be reported", config.pollSeconds * 1000);
    const metrics = join(runDir(config.runsDir, "run_trunc1"), "metrics.jsonl");
    writeFileSync(`${metrics}.go`, "");
    await untilOnClock(clock, () => existsSync(`${metrics}.done`), "the process to rewrite its metrics file", config.pollSeconds * 1000);
    await untilOnClock(clock, () => steps().length >= 3, "the point written after the truncation", config.pollSeconds * 1000);
    expect(steps()).toEqual([1, 2, 3]);
    // Indexes go on counting: the exchange keeps the first point it gets for an index.
    expect(reporter.reports.filter((r) => r.runId === "run_trunc1").flatMap((r) => (r.metrics ?? []).map((m) => m.index))).toEqual([0, 1, 2]);
  });

  it("sends more metrics than one report takes in several, its end with the last", async () => {
    const clock = new ManualClock();
    // Writes 600 lines at once, when told to: after the monitor's first look.
    const writer = "import json, os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.01)\nwith open(os.environ['ROLLOUT_RUN_METRICS'], 'a') as f:\n    for i in range(600): f.write(json.dumps({'step': i, 'loss': 1.0 / (i + 1)}) + '\\n')\n";
    const { sup, reporter, config, pids } = setup([{ name: "trainer", command: ["python3", "-c", writer, "{run_dir}/go"] }], { clock });
    await sup.start(startCommand("run_many01"));
    await waitUntil(() => reporter.status.get("run_many01") === "running" && clock.pending.length > 0, "the monitor to wait for its next look");
    writeFileSync(join(config.runsDir, "run_many01", "go"), "");
    await waitUntil(() => !groupAlive(pids()[0]!), "the trainer to write its metrics and exit");
    await untilOnClock(clock, () => sup.current === null, "the run to be over", 1000);
    expect(reporter.refused).toEqual([]);
    const ours = reporter.reports.filter((r) => r.runId === "run_many01");
    // 500 and the rest: with the end, or just before it if the monitor looked before it saw the exit.
    expect(ours.map((r) => r.metrics?.length ?? 0).filter((n) => n > 0)).toEqual([500, 100]);
    expect(ours.at(-1)?.status).toBe("completed");
    expect(ours.flatMap((r) => r.metrics ?? []).map((p) => p.index)).toEqual([...Array(600).keys()]);
    expect(reporter.status.get("run_many01")).toBe("completed");
  });

  it("drops a metrics line too large for the exchange to store, with a warning, and reports the others", async () => {
    const writer = "import json, os\nwith open(os.environ['ROLLOUT_RUN_METRICS'], 'a') as f:\n    for i, s in enumerate([1, 2_000_000, 1]): f.write(json.dumps({'step': i, 'samples': 'x' * s}) + '\\n')\n";
    const { sup, reporter, logger } = setup([{ name: "trainer", command: ["python3", "-c", writer] }]);
    await sup.start(startCommand("run_huge01"));
    await sup.settled();
    expect(reporter.status.get("run_huge01")).toBe("completed");
    expect(reporter.reports.flatMap((r) => r.metrics ?? []).map((p) => p.index)).toEqual([0, 2]);
    expect(logger.has(/^warn run run_huge01: dropped a metrics line the exchange cannot store: line 2 of .*metrics\.jsonl is 2,000,\d{3} bytes as stored/)).toBe(true);
  });

  it("reports a metrics line whose step or timestamp the exchange cannot take without them, and drops one it cannot take at all, keeping the others", async () => {
    // A step of time.time_ns() (no safe integer), a timestamp of 1e999 (no finite time), a value of 1e999 (JSON holds no infinity).
    const lines = ['{"step": 1, "r": 0.1}', '{"step": 1700000000000000000, "r": 0.2}', '{"step": 3, "timestamp": 1e999, "r": 0.3}', '{"step": 4, "r": 1e999}', '{"step": 5, "r": 0.5}'];
    const writer = `import os\nwith open(os.environ['ROLLOUT_RUN_METRICS'], 'a') as f:\n    f.write(${JSON.stringify(lines.join("\n") + "\n")})\n`;
    const { sup, reporter, logger } = setup([{ name: "trainer", command: ["python3", "-c", writer] }]);
    await sup.start(startCommand("run_odd001"));
    await sup.settled();
    expect(reporter.status.get("run_odd001")).toBe("completed");
    expect(reporter.refused).toEqual([]);
    const points = reporter.reports.flatMap((r) => r.metrics ?? []);
    expect(points.map((p) => [p.index, p.step, p.values["r"]])).toEqual([
      [0, 1, 0.1],
      [1, null, 0.2],
      [2, 3, 0.3],
      [4, 5, 0.5],
    ]);
    expect(points.every((p) => Number.isFinite(p.at))).toBe(true);
    expect(logger.has(/^warn run run_odd001: dropped a metrics line the exchange cannot store: line 4 of .*metrics\.jsonl: values\.r: /)).toBe(true);
  });

  it("reports a run's end without its metrics when the exchange refuses them with it", async () => {
    const clock = new ManualClock();
    // Writes its lines when told to: after the monitor's first look, so they go with the stop.
    const writer = "import json, os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.01)\nwith open(os.environ['ROLLOUT_RUN_METRICS'], 'a') as f:\n    for i in range(3): f.write(json.dumps({'step': i}) + '\\n')\ntime.sleep(60)\n";
    const { reporter, config, logger, stop } = setup([{ name: "trainer", command: ["python3", "-c", writer, "{run_dir}/go"] }], { clock });
    // An exchange that refuses every point: a report it will not take, however the agent sized it.
    const refusing: RunReporter = {
      report: async (runId, r) => ((r.metrics?.length ?? 0) > 0 ? { refused: 413 } : reporter.report(runId, r)),
      activeRuns: () => reporter.activeRuns(),
    };
    const sup = new RunSupervisor({ config, reporter: refusing, clock, logger, agentId: "host-1", stop: stop.signal });
    await sup.start(startCommand("run_refd01"));
    await waitUntil(() => reporter.status.get("run_refd01") === "running" && clock.pending.length > 0, "the monitor to wait for its next look");
    const metrics = join(config.runsDir, "run_refd01", "metrics.jsonl");
    writeFileSync(join(config.runsDir, "run_refd01", "go"), "");
    await waitUntil(() => existsSync(metrics) && readFileSync(metrics, "utf8").split("\n").length > 3, "the trainer to write its metrics");
    const stopping = sup.stop("run_refd01", "operator asked");
    let over = false;
    void stopping.then(() => (over = true));
    await untilOnClock(clock, () => over, "the stop to finish", 200);
    const out = await stopping;
    expect(reporter.status.get("run_refd01")).toBe("stopped");
    expect(reporter.last("run_refd01")).toMatchObject({ status: "stopped", detail: out.detail, metrics: [] });
    expect(sup.current).toBeNull();
  });

  it("stops on request in reverse order; a process that ignores SIGTERM is killed after the grace period", async () => {
    const clock = new ManualClock();
    const { sup, reporter, pids } = setup([proc("api", ""), proc("trainer", "--ignore-term")], { clock, grace: 10 });
    await sup.start(startCommand("run_stop01"));
    await waitUntil(() => reporter.status.get("run_stop01") === "running", "the run to be running");
    await waitUntil(() => readFileSync(join(sup["d"].config.runsDir, "run_stop01", "trainer.log"), "utf8").includes("trainer up"), "the trainer's signal handler");
    reporter.status.set("run_stop01", "stopping");
    const stopping = sup.stop("run_stop01", "operator asked");
    // SIGTERM sent; the trainer ignores it. 9 s later it still runs; at 10 s it is killed.
    await waitUntil(() => readFileSync(join(sup["d"].config.runsDir, "run_stop01", "trainer.log"), "utf8").includes("ignores SIGTERM"), "the trainer to get SIGTERM");
    await clock.advance(9000);
    expect(groupAlive(pids()[1]!)).toBe(true);
    let over = false;
    void stopping.then(() => (over = true));
    await untilOnClock(clock, () => over, "the stop to finish", 200);
    const out = await stopping;
    expect(out.ok).toBe(true);
    expect(out.detail).toMatch(/^stopped \(operator asked\): trainer ignored SIGTERM for 10 s and was killed with SIGKILL; api stopped with SIGTERM/);
    expect(reporter.last("run_stop01")).toMatchObject({ status: "stopped" });
    expect(reporter.status.get("run_stop01")).toBe("stopped");
    for (const pid of pids()) expect(groupAlive(pid)).toBe(false);
  });

  it("stops a run while it is still starting, without waiting for its readiness deadline", async () => {
    const { sup, reporter, pids } = setup([proc("api", "", { ready: { port: 1 }, readyTimeoutSeconds: 600 }), proc("trainer", "")]);
    await sup.start(startCommand("run_early1"));
    await waitUntil(() => procsOf(reporter, "run_early1")[0]?.state === "starting", "api to be starting");
    const out = await sup.stop("run_early1", "changed my mind");
    expect(out.detail).toMatch(/api stopped with SIGTERM/);
    expect(reporter.statuses("run_early1").at(-1)).toBe("stopped");
    expect(procsOf(reporter, "run_early1")[1]).toMatchObject({ state: "pending", pid: null });
    for (const pid of pids()) expect(groupAlive(pid)).toBe(false);
  });
});

describe("a run whose metrics lines are large, on the real exchange", () => {
  let ex: TestExchange;
  beforeAll(async () => {
    ex = await startTestExchange();
  });
  afterAll(async () => {
    await ex?.stop();
  });

  it("still ends completed there when its last lines together exceed a request body", async () => {
    const engine = await ex.newEngine();
    const trainer = new RunsClient({ baseUrl: engine.baseUrl, token: engine.tokens.trainer });
    const operator = new RunsClient({ baseUrl: engine.baseUrl, token: engine.tokens.operator });
    await trainer.reportCatalog({ environments: [{ name: "gsm8k", class_name: "GSM8kEnv", file_path: "/opt/envs/gsm8k_server.py", fields: [] }] });
    await operator.selectEnvironment({ name: "gsm8k" });
    const runId = (await operator.startRun()).run_id;

    // Three lines of 1.5 MB each (e.g. per-sample rewards logged by a trainer), then exit 0.
    const writer = "import json, os, time\ntime.sleep(0.3)\nwith open(os.environ['ROLLOUT_RUN_METRICS'], 'a') as f:\n    for i in range(3): f.write(json.dumps({'step': i, 'train/samples': 'x' * 1_500_000}) + '\\n')\n";
    const state = tempDir();
    const config = runsConfig({ processes: [{ name: "trainer", command: ["python3", "-c", writer] }] }, state.path);
    const logger = new MemoryLogger();
    const stop = new AbortController();
    cleanups.push(() => {
      stop.abort();
      state.remove();
    });
    // The supervisor's polls run on a manual clock, so the final report is the one that carries the lines.
    const clock = new ManualClock();
    const reporter = new ExchangeReporter(trainer, { reach: new Reachability(logger, realClock, engine.baseUrl), logger, stop: stop.signal, maxBackoffMs: 200 });
    const sup = new RunSupervisor({ config, reporter, clock, logger, agentId: "host-1", stop: stop.signal });
    await sup.start(startCommand(runId));
    await waitUntil(async () => (await operator.runStatus(runId)).status === "running", "the run to be running on the exchange", 30_000);
    const pid = await waitUntil(() => readJournal(config.runsDir, runId)?.processes[0]?.pid, "the trainer's pid");
    await waitUntil(() => !groupAlive(pid), "the trainer to exit", 30_000);
    // The monitor's next poll sees the exit and reports the end with the lines not sent yet.
    await untilOnClock(clock, () => sup.current === null, "the agent to finish the run", 1000);
    const s = await operator.runStatus(runId);
    expect({ status: s.status, refused: logger.lines.filter((l) => /could not report/.test(l)).map((l) => l.slice(0, 160)) }).toEqual({ status: "completed", refused: [] });
    expect((await operator.runResults(runId)).metrics_history.map((p) => p.index)).toEqual([0, 1, 2]);
  });
});

describe("the metrics file", () => {
  it("reads a line whose writer flushed it in the middle of a character as written", () => {
    const state = tempDir();
    cleanups.push(() => state.remove());
    const path = join(state.path, "metrics.jsonl");
    const line = Buffer.from(JSON.stringify({ step: 1, sample: "café ✓" }) + "\n", "utf8");
    const cut = line.indexOf(Buffer.from("é", "utf8")) + 1; // between the two bytes of "é"
    writeFileSync(path, line.subarray(0, cut));
    const reader = new MetricsReader(path, () => 0);
    expect(reader.read()).toEqual([]);
    appendFileSync(path, line.subarray(cut));
    expect(reader.read()).toEqual([{ index: 0, step: 1, at: 0, values: { sample: "café ✓" } }]);
  });

  const line = (o: object): string => JSON.stringify(o) + "\n";
  const metricsFile = (): string => {
    const state = tempDir();
    cleanups.push(() => state.remove());
    return join(state.path, "metrics.jsonl");
  };

  it("keeps a line Python wrote with NaN or Infinity (a loss that diverged), those values as their names", () => {
    // json.dumps writes float("nan") as the bare token NaN, which JSON.parse refuses: the line
    // was dropped, so the metrics stopped at the step the run went wrong.
    const path = metricsFile();
    writeFileSync(path, '{"step": 7, "loss": NaN, "grad_norm": Infinity, "min": -Infinity, "lr": 1e-5, "note": "NaN"}\n');
    expect(new MetricsReader(path, () => 0).read()).toEqual([
      { index: 0, step: 7, at: 0, values: { loss: "NaN", grad_norm: "Infinity", min: "-Infinity", lr: 1e-5, note: "NaN" } },
    ]);
  });

  it("reads the lines written after the file was truncated and rewritten shorter", () => {
    const path = metricsFile();
    writeFileSync(path, line({ step: 1, loss: 0.9 }) + line({ step: 2, loss: 0.8 }) + line({ step: 3, loss: 0.7 }));
    const reader = new MetricsReader(path, () => 0);
    expect(reader.read().map((p) => p.step)).toEqual([1, 2, 3]);
    // The trainer restarts and opens its metrics file afresh ("w"): a shorter file.
    writeFileSync(path, line({ step: 4, loss: 0.6 }));
    expect(reader.read().map((p) => ({ index: p.index, step: p.step, values: p.values }))).toEqual([{ index: 3, step: 4, values: { loss: 0.6 } }]);
  });

  it("reads whole lines, not the middle of one, after the file was truncated and then grew past the old size", () => {
    const path = metricsFile();
    writeFileSync(path, line({ step: 1, loss: 0.9 }));
    const reader = new MetricsReader(path, () => 0);
    expect(reader.read().map((p) => p.step)).toEqual([1]);
    truncateSync(path, 0);
    appendFileSync(path, line({ step: 10, loss: 0.5 }) + line({ step: 11, loss: 0.4 }) + line({ step: 12, loss: 0.3 }));
    expect(reader.read().map((p) => p.step)).toEqual([10, 11, 12]);
  });

  it("reads a file that was replaced by another (a rotation) from its start, dropping what was left of a line", () => {
    const path = metricsFile();
    writeFileSync(path, line({ step: 1 }) + '{"step": 2, "lo');
    const reader = new MetricsReader(path, () => 0);
    expect(reader.read().map((p) => p.step)).toEqual([1]);
    writeFileSync(`${path}.new`, line({ step: 3 }) + line({ step: 4 }) + line({ step: 5 }));
    renameSync(`${path}.new`, path);
    expect(reader.read().map((p) => p.step)).toEqual([3, 4, 5]);
  });

  it("reads at most its chunk of the file per call and catches up over the next ones", () => {
    const path = metricsFile();
    const lines = Array.from({ length: 100 }, (_, i) => line({ step: i, loss: 1 / (i + 1) }));
    writeFileSync(path, lines.join(""));
    const reader = new MetricsReader(path, () => 0, undefined, { maxReadBytes: 256, maxLineBytes: 128 });
    const steps: Array<number | null> = [];
    let calls = 0;
    do {
      steps.push(...reader.read().map((p) => p.step));
      calls++;
    } while (reader.behind);
    expect(steps).toEqual(lines.map((_, i) => i));
    expect(calls).toBe(Math.ceil(Buffer.byteLength(lines.join("")) / 256));
  });

  it("drops a line longer than its cap, with a warning, instead of holding it, and reads on after it", () => {
    const path = metricsFile();
    const logger = new MemoryLogger();
    const reader = new MetricsReader(path, () => 0, logger, { maxReadBytes: 64, maxLineBytes: 100 });
    writeFileSync(path, line({ step: 1 }) + `{"step": 2, "blob": "${"x".repeat(300)}`);
    const read = (): Array<[number, number | null]> => {
      const out: Array<[number, number | null]> = [];
      do out.push(...reader.read().map((p): [number, number | null] => [p.index, p.step]));
      while (reader.behind);
      return out;
    };
    expect(read()).toEqual([[0, 1]]);
    // Still no newline: nothing of the long line is held.
    appendFileSync(path, "y".repeat(500));
    expect(read()).toEqual([]);
    appendFileSync(path, '"}\n' + line({ step: 3 }));
    expect(read()).toEqual([[2, 3]]);
    expect(logger.lines.filter((l) => /dropped line 2, longer than 100 bytes/.test(l))).toHaveLength(1);
  });
});

describe("after an agent restart", () => {
  it("adopts the processes of a running run and notices when one of them ends", async () => {
    const first = setup([proc("api", ""), proc("trainer", "")]);
    await first.sup.start(startCommand("run_adopt1"));
    await waitUntil(() => first.reporter.status.get("run_adopt1") === "running", "the run to be running");
    const pids = first.pids();
    first.stop.abort(); // the first agent dies: its processes stay

    const second = new RunSupervisor({ config: first.config, reporter: first.reporter, clock: realClock, logger: new MemoryLogger(), agentId: "host-1", stop: new AbortController().signal });
    first.reporter.active = {
      runs: [
        {
          run_id: "run_adopt1",
          environment: "gsm8k",
          status: "running",
          detail: "",
          created_at: 0,
          started_at: 0,
          ended_at: null,
          running_time_seconds: 0,
          stop_requested: false,
          command_seq: 1,
          environment_file: "/opt/envs/gsm8k_server.py",
          config_yaml: "",
          processes: [],
        },
      ],
    };
    await second.reattach();
    expect(second.current).toEqual({ run_id: "run_adopt1", phase: "running" });
    expect(first.reporter.last("run_adopt1")).toMatchObject({ status: "running", detail: "reattached after an agent restart" });
    process.kill(-pids[1]!, "SIGKILL"); // the trainer dies
    await second.settled();
    expect(first.reporter.last("run_adopt1")).toMatchObject({
      status: "failed",
      detail: "trainer ended (exit status unknown: it was adopted after an agent restart); the other processes were stopped",
    });
    expect(groupAlive(pids[0]!)).toBe(false);
    expect(readJournal(first.config.runsDir, "run_adopt1")?.closed).toBe(true);
  });

  it("notices an adopted process ending while what it started lives on in its group, and stops that with the run", async () => {
    const first = setup([proc("api", ""), proc("trainer", "--helper")]);
    await first.sup.start(startCommand("run_leader"));
    await waitUntil(() => first.reporter.status.get("run_leader") === "running", "the run to be running");
    const [api, trainer] = first.pids();
    // The trainer's helper (a data loader, an inference child) sleeps in the trainer's group.
    const helper = await waitUntil(() => sleepersIn(trainer!)[0], "the trainer's helper to start");
    first.stop.abort(); // the first agent dies: its processes stay

    const second = new RunSupervisor({ config: first.config, reporter: first.reporter, clock: realClock, logger: new MemoryLogger(), agentId: "host-1", stop: new AbortController().signal });
    first.reporter.active = { runs: [{ ...view, run_id: "run_leader", status: "running" }] };
    await second.reattach();
    expect(second.current).toEqual({ run_id: "run_leader", phase: "running" });
    // The trainer itself crashes; its helper goes on holding the GPUs.
    process.kill(trainer!, "SIGKILL");
    await waitUntil(() => !processAlive(trainer!), "the trainer to be gone");
    expect(processAlive(helper)).toBe(true);
    await waitUntil(() => first.reporter.status.get("run_leader") === "failed", "the adopted run to be reported failed", 5000);
    await second.settled();
    expect(first.reporter.last("run_leader")).toMatchObject({ status: "failed", detail: "trainer ended (exit status unknown: it was adopted after an agent restart); the other processes were stopped" });
    for (const pid of [api!, trainer!]) expect(groupAlive(pid)).toBe(false);
    expect(processAlive(helper)).toBe(false);
  });

  it("reports a run whose process died while no agent ran, and kills processes of runs that are over", async () => {
    const first = setup([proc("api", ""), proc("trainer", "")]);
    await first.sup.start(startCommand("run_dead01"));
    await waitUntil(() => first.reporter.status.get("run_dead01") === "running", "the run to be running");
    const pids = first.pids();
    first.stop.abort();
    process.kill(-pids[0]!, "SIGKILL");
    await waitUntil(() => !groupAlive(pids[0]!), "api to be gone");
    const second = new RunSupervisor({ config: first.config, reporter: first.reporter, clock: realClock, logger: new MemoryLogger(), agentId: "host-1", stop: new AbortController().signal });
    first.reporter.active = { runs: [{ ...view, run_id: "run_dead01", status: "running" }] };
    await second.reattach();
    expect(first.reporter.last("run_dead01")).toMatchObject({ status: "failed", detail: expect.stringMatching(/^api \(pid \d+\) ended while the agent was not running/) });
    expect(groupAlive(pids[1]!)).toBe(false);
    expect(second.current).toBeNull();

    // A third run left behind whose record the exchange no longer counts as active: killed.
    const third = setup([proc("api", "")]);
    await third.sup.start(startCommand("run_over01"));
    await waitUntil(() => third.reporter.status.get("run_over01") === "running", "the run to be running");
    third.stop.abort();
    const leftover = third.pids()[0]!;
    const fourth = new RunSupervisor({ config: third.config, reporter: new RecordingReporter(), clock: realClock, logger: new MemoryLogger(), agentId: "h", stop: new AbortController().signal });
    await fourth.reattach();
    await waitUntil(() => !groupAlive(leftover), "the leftover process to be killed");
    expect(existsSync(join(third.config.runsDir, "run_over01", "run.json"))).toBe(true);
    expect(readJournal(third.config.runsDir, "run_over01")?.closed).toBe(true);
  });

  it("reports a run that ended while no agent ran with all the metrics it wrote meanwhile, in reports the exchange takes", async () => {
    const first = setup([proc("api", ""), proc("trainer", "")]);
    await first.sup.start(startCommand("run_many02"));
    await waitUntil(() => first.reporter.status.get("run_many02") === "running", "the run to be running");
    first.stop.abort(); // the agent dies; the run goes on and logs 600 steps, then the trainer crashes
    const metrics = join(first.config.runsDir, "run_many02", "metrics.jsonl");
    for (let i = 0; i < 600; i++) appendFileSync(metrics, JSON.stringify({ step: i, "train/reward_mean": i / 600 }) + "\n");
    const [api, trainer] = first.pids();
    process.kill(-trainer!, "SIGKILL");
    await waitUntil(() => !groupAlive(trainer!), "the trainer to be gone");
    const second = new RunSupervisor({ config: first.config, reporter: first.reporter, clock: realClock, logger: new MemoryLogger(), agentId: "host-1", stop: new AbortController().signal });
    first.reporter.active = { runs: [{ ...view, run_id: "run_many02", status: "running" }] };
    await second.reattach();
    expect(groupAlive(api!)).toBe(false);
    expect(first.reporter.refused).toEqual([]);
    expect(first.reporter.status.get("run_many02")).toBe("failed");
    expect(first.reporter.last("run_many02")).toMatchObject({ status: "failed", detail: expect.stringMatching(/^trainer \(pid \d+\) ended while the agent was not running/) });
    expect(first.reporter.reports.filter((r) => r.runId === "run_many02").flatMap((r) => r.metrics ?? [])).toHaveLength(600);
  });

  it("leaves a run's processes and notes alone when it cannot learn which runs are active", async () => {
    const first = setup([proc("trainer", "")]);
    await first.sup.start(startCommand("run_unkn01"));
    await waitUntil(() => first.reporter.status.get("run_unkn01") === "running", "the run to be running");
    first.stop.abort(); // the first agent dies: its processes stay
    const [trainer] = first.pids();
    const restarted = (baseUrl: string, stop: AbortSignal) => {
      const logger = new MemoryLogger();
      const reach = new Reachability(logger, realClock, baseUrl);
      const reporter = new ExchangeReporter(new RunsClient({ baseUrl, token: "trainer-token" }), { reach, logger, stop, maxBackoffMs: 200 });
      return { sup: new RunSupervisor({ config: first.config, reporter, clock: realClock, logger, agentId: "host-1", stop }), logger };
    };

    // The Worker is down, and the agent is told to stop before it ever answers.
    const stop = new AbortController();
    const unreachable = restarted(`http://127.0.0.1:${await freePort()}/e/default`, stop.signal);
    const reattached = unreachable.sup.reattach();
    await waitUntil(() => unreachable.logger.has(/could not list this engine's active runs .*retrying/), "the agent to retry the list");
    stop.abort();
    await reattached;
    expect(unreachable.sup.current).toBeNull();
    expect(readJournal(first.config.runsDir, "run_unkn01")?.closed).toBe(false);
    expect(groupAlive(trainer!)).toBe(true);

    // The exchange refuses the agent (a token rotated meanwhile).
    const server = createServer((_req, res) => {
      res.writeHead(401, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: "unauthorized", detail: "bad token" }));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
    const refused = restarted(`http://127.0.0.1:${(server.address() as AddressInfo).port}/e/default`, new AbortController().signal);
    await refused.sup.reattach();
    expect(refused.logger.has(/left the processes of run_unkn01 running/)).toBe(true);
    expect(readJournal(first.config.runsDir, "run_unkn01")?.closed).toBe(false);
    expect(groupAlive(trainer!)).toBe(true);

    // The next agent that gets an answer adopts the run.
    const answered = new RunSupervisor({ config: first.config, reporter: first.reporter, clock: realClock, logger: new MemoryLogger(), agentId: "host-1", stop: new AbortController().signal });
    first.reporter.active = { runs: [{ ...view, run_id: "run_unkn01", status: "running" }] };
    await answered.reattach();
    expect(answered.current).toEqual({ run_id: "run_unkn01", phase: "running" });
    await answered.stop("run_unkn01", "the test is over");
    expect(groupAlive(trainer!)).toBe(false);
  });

  it("adopts a run once the exchange answers when it could not be reached at the agent's start, then reports the run's end", async () => {
    const first = setup([proc("trainer", "")]);
    await first.sup.start(startCommand("run_late01"));
    await waitUntil(() => first.reporter.status.get("run_late01") === "running", "the run to be running");
    first.stop.abort(); // the first agent dies: its processes stay
    const [trainer] = first.pids();

    // The restarted agent's exchange is down: nothing listens on its port yet.
    const port = await freePort();
    const logger = new MemoryLogger();
    const stop = new AbortController();
    cleanups.push(() => stop.abort());
    const baseUrl = `http://127.0.0.1:${port}/e/default`;
    const reporter = new ExchangeReporter(new RunsClient({ baseUrl, token: "trainer-token" }), { reach: new Reachability(logger, realClock, baseUrl), logger, stop: stop.signal, maxBackoffMs: 200 });
    const sup = new RunSupervisor({ config: first.config, reporter, clock: realClock, logger, agentId: "host-1", stop: stop.signal });
    const reattached = sup.reattach();
    await waitUntil(() => logger.has(/could not list this engine's active runs .*retrying/), "the agent to retry the list");

    // The exchange comes up.
    const reports: Array<{ status: string; detail: string }> = [];
    const server = createServer((req, res) => {
      let body = "";
      req.on("data", (c: Buffer) => (body += c.toString()));
      req.on("end", () => {
        res.writeHead(200, { "content-type": "application/json" });
        if (req.method === "GET" && req.url?.endsWith("/runs/agent/active")) return res.end(JSON.stringify({ runs: [{ ...view, run_id: "run_late01", status: "running" }] }));
        const report = JSON.parse(body) as { status: string; detail: string };
        reports.push(report);
        res.end(JSON.stringify({ run_id: "run_late01", status: report.status, must_stop: false }));
      });
    });
    await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
    cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
    await reattached;
    expect(sup.current).toEqual({ run_id: "run_late01", phase: "running" });
    expect(reports[0]).toMatchObject({ status: "running", detail: "reattached after an agent restart" });

    process.kill(-trainer!, "SIGKILL");
    await sup.settled();
    expect(reports.at(-1)).toMatchObject({ status: "failed", detail: "trainer ended (exit status unknown: it was adopted after an agent restart); the other processes were stopped" });
    expect(readJournal(first.config.runsDir, "run_late01")?.closed).toBe(true);
  });

  it("neither adopts nor signals a process that holds a noted pid but started after the noted process", async () => {
    // An unrelated daemon (its own session and group) that got the pid of a run's process after a reboot.
    const daemon = spawn("sleep", ["120"], { detached: true, stdio: "ignore" });
    daemon.unref();
    const pid = daemon.pid as number;
    cleanups.push(() => {
      try {
        process.kill(-pid, "SIGKILL");
      } catch {
        // gone
      }
    });
    await waitUntil(() => processAlive(pid), "the daemon to run");
    const dayBefore = Date.now() - 86_400_000;
    const { sup, reporter, config } = setup([proc("trainer", "")]);
    const note = (runId: string): void => writeJournal(config.runsDir, { run_id: runId, closed: false, processes: [{ name: "trainer", pid, order: 0, proc_started_at: dayBefore }] });
    note("run_reuse1"); // active and running on the exchange: adopted if its processes run
    note("run_reuse2"); // no longer active on the exchange: what is left of it is killed
    const reported = { name: "trainer", order: 0, state: "ready" as const, pid, command: "", log_path: "", log_tail: "", exit_code: null, signal: null, started_at: dayBefore / 1000, ready_at: null, ended_at: null, detail: "" };
    reporter.active = {
      runs: [
        { ...view, run_id: "run_reuse1", status: "running" },
        // No note of its own: the pids the exchange has, with the start it was told.
        { ...view, run_id: "run_reuse3", status: "running", processes: [reported] },
      ],
    };
    await sup.reattach();
    expect(sup.current).toBeNull();
    for (const runId of ["run_reuse1", "run_reuse3"]) {
      expect(reporter.last(runId)).toMatchObject({ status: "failed", detail: `trainer (pid ${pid}) ended while the agent was not running; the others were stopped` });
      expect(reporter.last(runId)?.processes?.[0]?.detail).toBe(`ended while no agent ran; pid ${pid} now belongs to another process, which was left alone`);
    }
    expect(readJournal(config.runsDir, "run_reuse2")?.closed).toBe(true);
    // A stop_run of a run not running here stops what its note says is left of it: nothing.
    note("run_reuse4");
    expect(await sup.stop("run_reuse4", "operator")).toEqual({ ok: true, detail: "run run_reuse4 was not running on this host" });
    await new Promise((r) => setTimeout(r, 100));
    expect(processAlive(pid)).toBe(true);
  });

  it("takes start_run, stop_run and test_inference commands only with ids of the exchange's shape, never a path", () => {
    expect(StartRunCommand.safeParse(startCommand("run_k3x9ab")).success).toBe(true);
    for (const bad of ["../../../etc", "run_../x", "/tmp/run_abcd", "run_ABCD", ""]) {
      expect(StartRunCommand.safeParse(startCommand(bad)).success).toBe(false);
      expect(StopRunCommand.safeParse({ kind: "stop_run", run_id: bad, reason: "" }).success).toBe(false);
    }
    const test = { kind: "test_inference", environment: { name: "g", class_name: "G", file_path: "/g.py" }, num_steps: 1, group_size: 1, models: [], timeout_seconds: 1 };
    expect(TestInferenceCommand.safeParse({ ...test, test_id: "itest_k3x9ab" }).success).toBe(true);
    expect(TestInferenceCommand.safeParse({ ...test, test_id: "../itest_k3x9ab" }).success).toBe(false);
  });
});

describe("a run status from a newer exchange", () => {
  /** The run started by one agent that then dies, and a restarted agent that reads it active in `status`, as a newer exchange may say it. */
  async function restartWith(status: string) {
    const { sup, reporter, config, pids, stop } = setup([proc("api", ""), proc("trainer", "")]);
    await sup.start(startCommand("run_new1"));
    await waitUntil(() => reporter.status.get("run_new1") === "running", "the run to be running");
    const running = pids();
    stop.abort(); // the first agent dies: its processes stay
    // The agent's schema reads a status it does not know (answers are read with openEnum).
    reporter.active = AgentActiveRunsResponse.parse({
      runs: [{ run_id: "run_new1", environment: "gsm8k", status, detail: "", created_at: 0, started_at: 0, ended_at: null, running_time_seconds: 0, stop_requested: false, command_seq: 1, environment_file: "/opt/envs/gsm8k_server.py", config_yaml: "", processes: [] }],
    });
    const second = new RunSupervisor({ config, reporter, clock: realClock, logger: new MemoryLogger(), agentId: "host-1", stop: new AbortController().signal });
    await second.reattach();
    return { alive: running.map((p) => groupAlive(p)), last: reporter.last("run_new1")?.status };
  }

  it("leaves the processes of an active run in a status it does not know running after an agent restart, as it did when it could not read the answer", async () => {
    const r = await restartWith("paused");
    // The training's processes on the GPUs are not stopped, nor the run reported failed, for a status the agent cannot interpret.
    expect(r.alive).toEqual([true, true]);
    expect(r.last).not.toBe("failed");
  }, 60_000);

  it("(control) adopts them, alive, when the status is running", async () => {
    const r = await restartWith("running");
    expect(r.alive).toEqual([true, true]);
  }, 60_000);
});
