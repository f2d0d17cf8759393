/**
 * End to end: the real Worker (Miniflare, D1), the agent, real trainer processes and the
 * Python runner. Episodes are registered through the agent's facade and claimed and ended
 * through the public API, as an AgentJet trainer and SwarmClient would.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { EngineOverview } from "../../src/protocol";
import { groupAlive } from "../src/runs/process-group";
import { runAgent, testConfig } from "./support/agent-harness";
import { ManualClock } from "./support/manual-clock";
import { PyRunner } from "./support/py-runner";
import { exchangeSuite } from "./support/suite";
import { waitUntil } from "./support/wait";

const FIXTURES = join(import.meta.dirname, "fixtures");

const t = exchangeSuite({ commandLeaseSeconds: 3 });

async function agentWith(over: Parameters<typeof testConfig>[3] = {}) {
  const agent = await runAgent(testConfig(t.ex.url, t.engine, t.dir, over));
  t.defer(() => agent.stop({ stopTrainer: true }));
  return agent;
}

function runner(facade: string, episodes: string[], opts: { tcp?: boolean; ackDelay?: number } = {}): PyRunner {
  const r = new PyRunner({ facade, ipcDir: t.dir, episodes, ...opts });
  t.defer(() => r.kill());
  return r;
}

/** What the trainer does when it comes up: tells the engine it is rolling, through the facade. */
async function trainerSaysRolling(facadeUrl: string): Promise<void> {
  const res = await fetch(`${facadeUrl}/update_engine_status`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ engine_status: "ENGINE.ROLLING", global_step: 1 }),
  });
  expect(await res.json()).toEqual({ success: true, failure_reason: "" });
}

const overview = (): Promise<EngineOverview> => t.engine.viewer.overview();

describe("agent + Worker + runner", () => {
  it("starts the trainer, carries a result from end_episode to the runner, and stops the trainer", async () => {
    const agent = await agentWith({ trainerCommand: ["sh", join(FIXTURES, "trainer-graceful.sh"), "{config}"] });
    await t.engine.operator.syncTrainConfig("ajet:\n  project_name: e2e\n");
    await t.engine.operator.startEngine();
    await waitUntil(() => agent.trainer.status().state === "running", "the trainer to start");
    const log = join(t.dir, "logs", "trainer.log");
    await waitUntil(() => readFileSync(log, "utf8").includes("yaml: ajet:"), "the trainer to read its YAML");
    expect(readFileSync(log, "utf8")).toContain(`facade=${agent.facadeUrl}`);
    expect((await t.engine.viewer.getEngineStatus()).engine_status).toBe("ENGINE.BOOTING");

    await trainerSaysRolling(agent.facadeUrl);
    const r = runner(agent.facadeUrl, ["ep-e2e"]);
    expect((await r.waitFor("registered", "ep-e2e")).response).toEqual({ success: true, failure_reason: "" });
    await r.waitFor("listening", "ep-e2e");

    const claim = await t.engine.client.claimEpisode({ client_uuid: "client-1", episode_type: "train", discard_episode_timeout: 60 });
    expect(claim).toMatchObject({ success: true, episode_uuid: "ep-e2e" });
    const output = { reward: 0.75, is_success: true, metadata: { task_id: "task-1" }, log_metrics: { turns: 4 } };
    expect(await t.engine.client.endEpisode({ client_uuid: "client-1", episode_uuid: "ep-e2e", workflow_output: output, task_id: "task-1" })).toEqual({ success: true });

    expect((await r.waitFor("result", "ep-e2e")).payload).toMatchObject(output);
    await r.waitFor("acked", "ep-e2e");
    await waitUntil(async () => (await overview()).deliveries.delivered === 1, "the engine to record the delivery");
    const o = await overview();
    expect(o.deliveries).toMatchObject({ pending: 0, undeliverable: 0 });
    const pid = agent.trainer.status().pid;
    await waitUntil(async () => (await overview()).agent.trainer_pid === pid, "the heartbeat to carry the trainer's pid");
    expect((await overview()).agent).toMatchObject({ connected: true, agent_id: "test-agent", trainer_state: "running", trainer_pid: pid });

    await t.engine.operator.stopEngine();
    await waitUntil(() => agent.trainer.status().state === "idle", "the trainer to be stopped");
    expect(readFileSync(log, "utf8")).toContain("got SIGTERM, exiting");
    await waitUntil(async () => (await overview()).pending_commands === 0, "the stop command to be acked");
  });

  it("delivers a reaped episode's reset to its runner before anyone can claim the episode again", async () => {
    const agent = await agentWith();
    await trainerSaysRolling(agent.facadeUrl);
    const r = runner(agent.facadeUrl, ["ep-reap"], { tcp: true });
    await r.waitFor("listening", "ep-reap");

    const first = await t.engine.client.claimEpisode({ client_uuid: "slow-client", episode_type: "train", discard_episode_timeout: 1 });
    expect(first).toMatchObject({ success: true, episode_uuid: "ep-reap" });

    // Another client keeps trying; its first success must come after the runner's reset.
    let reclaimedAt = 0;
    let refusals = 0;
    let second = first;
    await waitUntil(async () => {
      const c = await t.engine.client.claimEpisode({ client_uuid: "fast-client", episode_type: "train", discard_episode_timeout: 60 });
      if (!c.success) {
        refusals++;
        return false;
      }
      reclaimedAt = Date.now() / 1000;
      second = c;
      return true;
    }, "the episode to be claimable again");
    const reset = r.of("reset", "ep-reap");
    expect(reset).toHaveLength(1);
    expect(reset[0]!.t).toBeLessThan(reclaimedAt);
    expect(refusals).toBeGreaterThan(0);
    expect(second.episode_uuid).toBe("ep-reap");
    expect(second.fence).toBeGreaterThan(first.fence ?? 0);

    // The late client's result is refused and never reaches the runner; the new claim's result does.
    await expect(
      t.engine.client.endEpisode({ client_uuid: "slow-client", episode_uuid: "ep-reap", workflow_output: { reward: 0, metadata: { task_id: "" } }, task_id: "" }),
    ).rejects.toThrow(/claim/);
    await t.engine.client.endEpisode({ client_uuid: "fast-client", episode_uuid: "ep-reap", workflow_output: { reward: 1, metadata: { task_id: "t" } }, task_id: "t" });
    expect((await r.waitFor("result", "ep-reap")).payload).toMatchObject({ reward: 1 });
    expect(agent.lines.some((l) => /episode ep-reap: context reset delivered/.test(l))).toBe(true);
  });

  it("shows a result delivered, not undeliverable, when the runner's only ack comes after the delivery timeout", async () => {
    const agent = await agentWith({ deliveryTimeoutSeconds: 0.2, deliveryAttempts: 5 });
    await trainerSaysRolling(agent.facadeUrl);
    const r = runner(agent.facadeUrl, ["ep-late"], { ackDelay: 0.5 });
    await r.waitFor("listening", "ep-late");
    const claim = await t.engine.client.claimEpisode({ client_uuid: "c", episode_type: "train", discard_episode_timeout: 60 });
    expect(claim).toMatchObject({ success: true, episode_uuid: "ep-late" });
    await t.engine.client.endEpisode({ client_uuid: "c", episode_uuid: "ep-late", workflow_output: { reward: 1, metadata: { task_id: "t" } }, task_id: "t" });

    await r.waitFor("acked", "ep-late");
    await waitUntil(async () => {
      const d = (await overview()).deliveries;
      return d.delivered + d.undeliverable === 1;
    }, "the engine to record the delivery's outcome");
    const o = await overview();
    expect({ deliveries: o.deliveries, detail: o.undeliverable[0]?.detail }).toMatchObject({ deliveries: { delivered: 1, undeliverable: 0 } });
    expect(r.of("result", "ep-late")).toHaveLength(1); // the runner got the result once
    expect(agent.lines.some((l) => /episode ep-late: result delivered .* acked during attempt [2-5] \(this one or an earlier one\)/.test(l))).toBe(true);
  });

  it("reports a runner that is gone: the engine shows the result as undeliverable", async () => {
    const agent = await agentWith({ deliveryTimeoutSeconds: 0.2, deliveryAttempts: 2 });
    await trainerSaysRolling(agent.facadeUrl);
    const reg = await fetch(`${agent.facadeUrl}/register_episode`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ episode_uuid: "ep-gone", zmq_listen_result_addr: `ipc://${t.dir}/nobody.sock` }),
    });
    expect(await reg.json()).toEqual({ success: true, failure_reason: "" });
    await t.engine.client.claimEpisode({ client_uuid: "c", episode_type: "train", discard_episode_timeout: 60 });
    await t.engine.client.endEpisode({ client_uuid: "c", episode_uuid: "ep-gone", workflow_output: { reward: 1, metadata: { task_id: "t" } }, task_id: "t" });
    await waitUntil(async () => (await overview()).deliveries.undeliverable === 1, "the result to be marked undeliverable");
    const o = await overview();
    expect(o.undeliverable[0]).toMatchObject({ episode_uuid: "ep-gone" });
    expect(o.undeliverable[0]!.detail).toMatch(/did not ack in 2 attempts of 0.2 s each/);
    expect(agent.lines.some((l) => /episode ep-gone: result NOT delivered/.test(l))).toBe(true);
  });

  it("takes the engine OFFLINE with the exit code and last lines when the trainer dies on its own", async () => {
    const agent = await agentWith({ trainerCommand: ["sh", join(FIXTURES, "trainer-exits-3.sh")] });
    await t.engine.operator.syncTrainConfig("x: 1\n");
    await t.engine.operator.startEngine();
    await waitUntil(async () => (await t.engine.viewer.getEngineStatus()).engine_status === "ENGINE.OFFLINE", "the engine to go OFFLINE");
    const s = await t.engine.viewer.getEngineStatus();
    expect(s.engine_status_detail).toMatch(/^trainer exited with code 3; last output:\n/);
    expect(s.engine_status_detail).toContain("CUDA out of memory");
    expect(s.engine_status_detail).toContain("[rollout-agent] trainer pid");
    expect(agent.trainer.status().state).toBe("exited");
  });

  it("takes the engine OFFLINE when the trainer's last output is no UTF-8: its tail is cut by bytes as the exchange counts them", async () => {
    // 60 lines of 200 Latin-1 bytes (0xE9): each reads back as U+FFFD, 3 bytes of UTF-8, so 16,384
    // characters of tail were about 24 KB, and the exchange refused the report for good (413).
    const script = `i=0; while [ $i -lt 60 ]; do head -c 200 /dev/zero | tr '\\000' '\\351'; echo; i=$((i+1)); done; exit 1`;
    await agentWith({ trainerCommand: ["sh", "-c", script] });
    await t.engine.operator.syncTrainConfig("x: 1\n");
    await t.engine.operator.startEngine();
    await waitUntil(async () => (await t.engine.viewer.getEngineStatus()).engine_status === "ENGINE.OFFLINE", "the engine to go OFFLINE");
    const detail = (await t.engine.viewer.getEngineStatus()).engine_status_detail;
    expect(detail).toMatch(/^trainer exited with code 1; last output:\n/);
    expect(detail).toContain("\uFFFD\uFFFD\uFFFD");
    expect(detail).toContain("[rollout-agent] trainer pid");
  });

  it("leaves no trainer behind when the engine's start comes while the agent shuts down, and leaves that start unacked", async () => {
    // The first trainer dies leaving a helper that ignores SIGTERM; its grace period runs on a
    // clock nobody moves, so the engine's next start waits for it until the agent's SIGTERM.
    const clock = new ManualClock(Date.now());
    const command = ["sh", "-c", "(trap '' TERM; while true; do sleep 0.1; done) & sleep 0.3; exit 3"];
    const agent = await runAgent(testConfig(t.ex.url, t.engine, t.dir, { trainerCommand: command, stopGraceSeconds: 600 }), clock);
    const pids = new Set<number>();
    t.defer(async () => {
      await agent.stop({ stopTrainer: true });
      for (const pid of pids) if (groupAlive(pid)) process.kill(-pid, "SIGKILL");
    });
    const starts = (): number => agent.lines.filter((l) => /: start the trainer/.test(l)).length;
    await t.engine.operator.syncTrainConfig("x: 1\n");
    await t.engine.operator.startEngine();
    const first = await waitUntil(() => agent.trainer.status().pid, "the first trainer to start");
    pids.add(first);
    await waitUntil(async () => (await t.engine.viewer.getEngineStatus()).engine_status === "ENGINE.OFFLINE", "the engine to go OFFLINE");
    await waitUntil(async () => (await overview()).pending_commands === 0, "the first start to be acked");
    await t.engine.operator.startEngine();
    await waitUntil(() => starts() === 2 && agent.dispatcher.backlog === 1, "the second start to wait for the leftovers");
    expect(groupAlive(first)).toBe(true);

    await agent.stop({ stopTrainer: true });
    // Whatever the start still waits for runs on the agent's clock: move it until the start is done.
    await waitUntil(async () => {
      if (agent.dispatcher.backlog === 0) return true;
      await clock.advance(100);
      await new Promise((r) => setTimeout(r, 10));
      return false;
    }, "the second start to finish");
    const pid = agent.trainer.status().pid;
    if (pid !== null) pids.add(pid);
    expect(pid).toBeNull();
    expect(readFileSync(join(t.dir, "logs", "trainer.log"), "utf8").match(/rollout-agent starts/g)).toHaveLength(1);
    // SIGKILLed as the agent went (trainer.ts endLeftovers): gone once the kernel and init have reaped it, which a loaded host takes a moment for.
    await waitUntil(() => !groupAlive(first), "the first trainer's leftovers to be gone after their SIGKILL");
    expect((await overview()).pending_commands).toBe(1);
  });

  it("refuses a start whose trainer command does not exist, and the engine says why", async () => {
    await agentWith({ trainerCommand: ["no-such-trainer-xyz", "--conf", "{config}"] });
    await t.engine.operator.syncTrainConfig("x: 1\n");
    await t.engine.operator.startEngine();
    await waitUntil(async () => (await t.engine.viewer.getEngineStatus()).engine_status === "ENGINE.OFFLINE", "the engine to go OFFLINE");
    expect((await t.engine.viewer.getEngineStatus()).engine_status_detail).toBe(
      'trainer failed to start: trainer command not found: "no-such-trainer-xyz" (check trainerCommand and PATH)',
    );
  });
});
