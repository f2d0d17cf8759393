/**
 * The dashboard in a real headless Chromium against the real Worker (Miniflare): after a scripted
 * run of a few global steps, rollout-buffer traffic and a few training runs, the page shows what
 * the API reports, follows new steps, groups and run states without a reload, and remembers its
 * token.
 */
import { mkdir, mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import { REPO_ROOT } from "../scripts/local/exchange";
import { createEngine, startExchange, type TestEngine, type TestExchange } from "./support/exchange";
import { launchBrowser, watchErrors, type TestBrowser } from "./support/browser";
import { rewardOf, scriptRun } from "./support/scripted-run";
import { completeOpenGroup, scriptBuffer } from "./support/scripted-buffer";
import { metricsAt, processes, scriptTrainingRuns } from "./support/scripted-training-runs";
import { attr, bufferOnPage, chartPoints, groupsOf, legendCounts, refreshesLater, runsOnPage } from "./support/page-data";

let ex: TestExchange;
let browser: TestBrowser;
let engine: TestEngine;
let page: Page;
let errors: string[];
const STEPS = 9;
const GROUP_SIZE = 4;
let activeRun: string;

beforeAll(async () => {
  ex = await startExchange();
  browser = await launchBrowser();
  engine = await createEngine(ex, "gsm8k-grpo");
  // Six finished runs and an active one: one more than the panel lists. Each start begins a run
  // of the history; the trainer's steps below are the active one's.
  activeRun = await scriptTrainingRuns(engine, { finished: 6 });
  await scriptRun(engine, { steps: STEPS, episodesPerStep: 8, finishInOpenStep: 7, leaveRunning: 6, leaveRegistered: 14, agent: { leavePending: 5 } });
  await scriptBuffer(engine, { groupSize: GROUP_SIZE, complete: 7, open: 3, pull: 2 });
  page = await browser.newPage();
  errors = watchErrors(page);
  // A short refresh period so the test sees updates within a second, not five.
  await page.goto(`${ex.url}/dashboard?engine=${engine.name}&token=${engine.tokens.viewer}&refresh=0.3`);
  await page.waitForSelector("#reward-chart");
});

afterAll(async () => {
  await browser?.close();
  await ex?.stop();
});

describe("dashboard after a scripted run", () => {
  it("shows the engine's status, step, agent and counts as the API reports them", async () => {
    const ov = await engine.as("viewer").overview();
    await refreshesLater(page);
    expect(await attr(page, "#engine-status", "data-status")).toBe(ov.engine_status);
    expect(await page.textContent("#engine-detail")).toBe(ov.engine_status_detail);
    expect(Number(await attr(page, "#global-step", "data-value"))).toBe(ov.global_step);
    expect(await attr(page, "#agent", "data-connected")).toBe(String(ov.agent.connected));
    expect(await legendCounts(page, "episode-counts")).toEqual(ov.episodes);
    expect(await legendCounts(page, "delivery-counts")).toEqual(ov.deliveries);
    expect(ov.episodes).toMatchObject({ registered: 14, claimed: 6 });
    expect(ov.deliveries).toMatchObject({ pending: 5, delivered: STEPS * 8 + 7 - 5 });
    expect(ov.agent).toMatchObject({ connected: true, host: "gpu-node-1" });
    expect(await attr(page, "#rollout-workers", "data-state")).toBe(ov.agent.rollout_workers?.state);
    expect(await page.textContent("#rollout-workers")).toBe("rollout workers running (pid 4250, job job-1)");
  });

  it("says so when the rollout workers end on their own, without reloading the page", async () => {
    const ended = "rollout workers exited with code 1; see /var/log/rollout/rollout-workers.log on the host";
    await engine.as("trainer").heartbeat({
      agent_id: "agent-1",
      host: "gpu-node-1",
      pid: 4242,
      version: "0.1.0",
      trainer: { state: "running", pid: 4243, started_at: null },
      rollout_workers: { state: "exited", pid: 4250, job_session: "job-1", detail: ended },
    });
    await page.waitForSelector('#rollout-workers[data-state="exited"]', { timeout: 10_000 });
    expect(await page.textContent("#rollout-workers")).toBe(ended);
    expect((await engine.as("viewer").overview()).agent.rollout_workers).toMatchObject({ state: "exited", detail: ended });
  });

  it("shows a trainer state and a rollout workers' state that a newer agent added as the text it sent, markup included", async () => {
    const state = "<b>paused</b>";
    await engine.as("trainer").heartbeat({
      agent_id: "agent-1",
      host: "gpu-node-1",
      pid: 4242,
      version: "0.2.0",
      trainer: { state, pid: 4243, started_at: null },
      rollout_workers: { state, pid: 4250, job_session: "job-1", detail: "held by the operator" },
    });
    await page.waitForSelector('#rollout-workers[data-state="<b>paused</b>"]', { timeout: 10_000 });
    expect({
      workers: await page.textContent("#rollout-workers"),
      workersClass: await attr(page, "#rollout-workers", "class"),
      trainer: (await page.textContent("section.card:has(#agent)"))?.includes("trainer <b>paused</b>"),
      bold: (await page.$$("section.card:has(#agent) b")).length,
    }).toEqual({ workers: "rollout workers <b>paused</b>: held by the operator", workersClass: "sub workers", trainer: true, bold: 0 });
  });

  it("draws one chart point per finished step, with the API's mean, std and count", async () => {
    const { history } = await engine.as("viewer").getRewardHistory();
    expect(history).toHaveLength(STEPS);
    const points = await chartPoints(page);
    expect(points).toEqual(
      history.map((h) => ({ step: h.global_step, mean: h.mean_reward, std: h.std_reward, count: h.count, min: h.min_reward, max: h.max_reward })),
    );
    // The curve is the scripted one: rewards rise with the step.
    expect(points.map((p) => p.mean)).toEqual([...points.map((p) => p.mean)].sort((a, b) => a - b));
    expect(points[0]?.min).toBe(Math.min(...Array.from({ length: 8 }, (_, i) => rewardOf(1, i))));
    expect(await page.getAttribute("#reward-chart path.band", "d")).toMatch(/^M.+Z$/);
  });

  it("lists the running episodes and the current step's completed tasks", async () => {
    const running = await engine.as("viewer").runningEpisodes({ limit: 25 });
    const rows = await page.$$eval("#episodes-table tbody tr", (els) => els.map((e) => e.getAttribute("data-episode")));
    expect(rows).toEqual(running.episodes.map((e) => e.episode_uuid));
    expect(Number(await attr(page, "#episodes-table", "data-total"))).toBe(running.total);

    const done = await engine.as("viewer").completedTasks();
    expect(done.tasks.length).toBeGreaterThan(0);
    expect(Number(await attr(page, "#tasks", "data-episodes"))).toBe(done.tasks.reduce((n, t) => n + t.episodes, 0));
    expect(Number(await attr(page, "#tasks", "data-tasks"))).toBe(done.tasks.length);
  });

  it("summarizes the rollout buffer as /health reports it", async () => {
    const { buffer } = await engine.as("viewer").health();
    await refreshesLater(page);
    const shown = await bufferOnPage(page);
    expect(shown.groups).toEqual(groupsOf(buffer));
    expect(shown.stats).toEqual({
      pending_steps: buffer.pending_steps,
      stale_groups: buffer.stale_groups,
      late_rows_ignored: buffer.late_rows_ignored,
      duplicate_rows: buffer.duplicate_rows,
      failed_sessions: buffer.failed_sessions,
      partial_groups_delivered: buffer.partial_groups_delivered,
      partial_groups_dropped: buffer.partial_groups_dropped,
      paced_refusals: buffer.paced_refusals,
      stored_bytes: buffer.stored_bytes,
      full_refusals: buffer.full_refusals,
    });
    expect(buffer.stored_bytes).toBeGreaterThan(0);
    expect(shown.config).toEqual(buffer.config);
    // The last pull's groups, as /health reports their staleness.
    expect(buffer.last_pull?.group_count).toBe(2);
    expect(shown.lastPull).toEqual(buffer.last_pull!.groups.map((g) => ({ group: g.group_id, lag: g.lag_versions, oldest: g.oldest_weight_version, queued: g.queued_seconds })));
    // What the script did, as the engine counted it.
    expect(buffer).toMatchObject({ pending_groups: 3, ready_groups: 5, delivered_groups: 2, pending_steps: 3 * GROUP_SIZE * 2, duplicate_rows: 2, late_rows_ignored: 1 });
    expect(shown.config).toMatchObject({ group_size: GROUP_SIZE, staleness_policy: "flag" });
    expect(await page.isVisible("#buffer-empty")).toBe(false);
  });

  it("shows the active training run, its processes and metrics, and the newest runs", async () => {
    const viewer = engine.runsAs("viewer");
    const list = await viewer.listRuns({ limit: 6 });
    const run = await viewer.runStatus(activeRun);
    await refreshesLater(page);
    const shown = await runsOnPage(page);
    expect(list.active_run_id).toBe(activeRun);
    expect(shown.current).toEqual({ run: activeRun, status: "running", active: "true", environment: run.environment });
    expect(shown.processes).toEqual([...run.processes].sort((a, b) => a.order - b.order).map((p) => ({ name: p.name, state: p.state })));
    expect(shown.processes.map((p) => p.state)).toEqual(["ready", "ready", "starting"]);
    expect(shown.metricsStep).toBe(run.metrics?.step);
    expect(shown.metrics).toEqual(run.metrics?.values);
    // Five of the seven runs, newest first, as the API lists them; older ones are mentioned, not listed.
    expect(shown.recent).toEqual(list.runs.slice(0, 5).map((r) => ({ run: r.run_id, status: r.status })));
    expect(await page.isVisible("#runs-older")).toBe(true);
    expect(new Set(list.runs.map((r) => r.status))).toEqual(new Set(["running", "completed", "failed", "stopped"]));
  });

  it("keeps the token out of the address bar and in localStorage", async () => {
    expect(page.url()).not.toContain("token=");
    expect(page.url()).toContain(`engine=${engine.name}`);
    const saved = await page.evaluate(() => localStorage.getItem("rollout-exchange.dashboard.v1"));
    expect(saved).toContain(engine.tokens.viewer);
  });

  it("takes a screenshot (docs/dashboard.png with UPDATE_SCREENSHOT=1)", async () => {
    // Only on request: a new PNG on every run would leave every checkout with a changed file.
    const dir = process.env["UPDATE_SCREENSHOT"] ? join(REPO_ROOT, "docs") : await mkdtemp(join(tmpdir(), "rx-shot-"));
    await mkdir(dir, { recursive: true });
    const png = await page.screenshot({ path: join(dir, "dashboard.png"), fullPage: true });
    // A PNG of a full page, not a blank one: the signature, and more than a few KiB of pixels.
    expect(png.subarray(1, 4).toString()).toBe("PNG");
    expect(png.length).toBeGreaterThan(30_000);
  });

  it("picks up a new global step without reloading the page", async () => {
    // A reload would drop this marker.
    await page.evaluate(() => Object.assign(window, { __sameDocument: true }));
    const trainer = engine.as("trainer");
    const client = engine.as("client");
    for (let i = 0; i < 4; i++) {
      await trainer.registerEpisode({ episode_uuid: `late-${i}` });
      const c = await client.claimEpisode({ client_uuid: `late-client-${i}`, discard_episode_timeout: 60 });
      await client.endEpisode({ client_uuid: `late-client-${i}`, episode_uuid: c.episode_uuid, task_id: "late", workflow_output: { reward: 2 + i * 0.1, metadata: { task_id: "late" } } });
    }
    await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING", global_step: STEPS + 2 });

    await page.waitForFunction((n) => document.querySelectorAll("#reward-chart circle.point").length === n, STEPS + 1, { timeout: 10_000 });
    const { history } = await engine.as("viewer").getRewardHistory();
    const last = history[history.length - 1];
    const points = await chartPoints(page);
    expect(points[points.length - 1]).toEqual({
      step: last?.global_step,
      mean: last?.mean_reward,
      std: last?.std_reward,
      count: last?.count,
      min: last?.min_reward,
      max: last?.max_reward,
    });
    expect(last?.global_step).toBe(STEPS + 1);
    // The open step held the 7 scripted episodes plus these 4.
    expect(last?.count).toBe(11);
    expect(Math.max(...points.map((p) => p.max))).toBeCloseTo(2.3);
    await page.waitForFunction(() => document.getElementById("engine-status")?.getAttribute("data-status") === "ENGINE.WEIGHT_SYNCING");
    expect(Number(await attr(page, "#global-step", "data-value"))).toBe(STEPS + 2);
    expect(await page.evaluate(() => "__sameDocument" in window)).toBe(true);
  });

  it("picks up buffer and run changes without reloading the page", async () => {
    await page.evaluate(() => Object.assign(window, { __samePanels: true }));
    const readyBefore = (await engine.as("viewer").health()).buffer.ready_groups;
    await completeOpenGroup(engine, 0, GROUP_SIZE);
    await engine.runsAs("trainer").reportRun(activeRun, { status: "completed", detail: "env exited with code 0", processes: processes("exited", { exit_code: 0 }), metrics: [metricsAt(3, 4)] });

    await page.waitForFunction(() => document.getElementById("run-current")?.getAttribute("data-status") === "completed", undefined, { timeout: 10_000 });
    await page.waitForFunction((n) => document.querySelector("#buffer-groups li[data-count=ready]")?.getAttribute("data-value") === String(n), readyBefore + 1, { timeout: 10_000 });
    const { buffer } = await engine.as("viewer").health();
    expect((await bufferOnPage(page)).groups).toEqual(groupsOf(buffer));
    const run = await engine.runsAs("viewer").runStatus(activeRun);
    const shown = await runsOnPage(page);
    // No run is active now: the panel details the newest one, as the latest run.
    expect(shown.current).toEqual({ run: activeRun, status: "completed", active: "false", environment: "gsm8k" });
    expect(shown.processes.map((p) => p.state)).toEqual(["exited", "exited", "exited"]);
    expect(shown.metricsStep).toBe(4);
    expect(shown.metrics).toEqual(run.metrics?.values);
    expect(shown.recent[0]).toEqual({ run: activeRun, status: "completed" });
    expect(await page.evaluate(() => "__samePanels" in window)).toBe(true);
  });

  it("opens with the remembered token when the URL carries none", async () => {
    const again = await browser.newPage();
    const errs = watchErrors(again);
    await again.goto(`${ex.url}/dashboard?engine=${engine.name}&refresh=0.3`);
    await again.waitForSelector("#reward-chart");
    expect(await again.isHidden("#login")).toBe(true);
    await again.close();
    expect(errs).toEqual([]);
  });

  it("shows the commands the agent refused, in its words, without reloading the page", async () => {
    const why = "no runs config on this host (set ROLLOUT_RUNS_CONFIG to a JSON file; see local-agent/src/runs/runs-config.ts)";
    const scan = await engine.runsAs("operator").scanEnvironments();
    const { commands } = await engine.as("trainer").pollCommands({ limit: 100 });
    expect(commands.map((c) => c.seq)).toContain(scan.command_seq);
    await engine.as("trainer").ackCommand({ seq: scan.command_seq, ok: false, detail: why });
    const item = `#agent-refusals li[data-seq="${scan.command_seq}"]`;
    await page.waitForSelector(item, { timeout: 10_000 });
    const text = (await page.textContent(item)) ?? "";
    expect(text).toMatch(new RegExp(`^refused scan_environments \\(command ${scan.command_seq}, [\\d.]+ s ago\\): `));
    expect(text.endsWith(why)).toBe(true);
    expect((await engine.as("viewer").overview()).refusals[0]).toMatchObject({ seq: scan.command_seq, kind: "scan_environments", detail: why });
  });

  it("shows Atropos's queue once a trainer registers, and in red what keeps its batches from being cut", async () => {
    expect(await page.$("#atropos-queued")).toBeNull();
    const at = (role: "trainer" | "client", path: string, body?: unknown) =>
      fetch(`${ex.url}/e/${engine.name}/t/${engine.tokens[role]}/atropos${path}`, {
        method: body === undefined ? "GET" : "POST",
        headers: body === undefined ? {} : { "content-type": "application/json" },
        body: body === undefined ? null : JSON.stringify(body),
      }).then((r) => r.json());
    await at("trainer", "/register", { wandb_group: "g", wandb_project: "p", batch_size: 4, max_token_len: 2048, checkpoint_dir: "", save_checkpoint_interval: 0, starting_step: 0, num_steps: 10 });
    await at("trainer", "/batch");
    await at("client", "/register-env", { max_token_length: 2048, desired_name: "gsm8k", weight: 1, group_size: 2 });
    const group = (n: number) => ({ tokens: Array.from({ length: n }, () => [1, 2]), masks: Array.from({ length: n }, () => [1, 1]), scores: Array.from({ length: n }, () => 1), env_id: null });
    await at("client", "/scored_data_list", [group(8), group(2), group(1)]);
    await at("trainer", "/batch");
    const ov = (await engine.as("viewer").overview()).atropos;
    expect(ov.stalls.map((x) => x.kind)).toEqual(["larger_than_batch"]);
    await page.waitForSelector("#atropos-stalls", { timeout: 10_000 });
    expect(Number(await attr(page, "#atropos-queued", "data-value"))).toBe(ov.queued_groups);
    expect(await page.$$eval("#atropos-stalls li", (items) => items.map((li) => [li.getAttribute("data-kind"), li.textContent]))).toEqual(ov.stalls.map((x) => [x.kind, x.detail]));
  });

  it("logged no error in the browser", () => {
    expect(errors).toEqual([]);
  });
});
