/**
 * The rollout buffer end to end: the real Worker on Miniflare, the real agent, a real worker
 * process and a real HTTP server standing in for the inference upstream's admin endpoint.
 * start_rollout launches the worker, which posts steps with the client token; the trainer
 * pulls the ready groups; the incomplete group's TTL runs out on the engine's real alarm and
 * the upstream is told to clear its session; a second start is "already running"; a restart
 * replaces the worker; shutting the agent down stops it.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { GetRolloutDataResponse } from "../../../src/protocol/buffer";
import { groupAlive } from "../../src/runs/process-group";
import { runAgent, testConfig } from "../support/agent-harness";
import { startTestExchange, type TestEngine, type TestExchange } from "../support/exchange";
import { tempDir } from "../support/temp";
import { waitUntil } from "../support/wait";

const WORKER = join(import.meta.dirname, "fixtures", "post-steps.mjs");

let ex: TestExchange;
let engine: TestEngine;
let upstream: Server;
let upstreamUrl: string;
const cleared: Array<{ session_ids: string[]; reason: string; group_ids: string[] }> = [];
const dir = tempDir();

beforeAll(async () => {
  ex = await startTestExchange();
  engine = await ex.newEngine();
  upstream = createServer((req, res) => {
    let text = "";
    req.on("data", (d: Buffer) => (text += d.toString()));
    req.on("end", () => {
      if (req.method === "POST" && req.url === "/admin/clear_sessions") cleared.push(JSON.parse(text) as (typeof cleared)[number]);
      res.writeHead(200, { "content-type": "application/json" }).end('{"status":"ok"}');
    });
  });
  await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
});

afterAll(async () => {
  upstream?.close();
  await ex?.stop();
  dir.remove();
});

/** Pulls until `groups` ready groups have come (in one pull or several). */
async function pullGroups(groups: number): Promise<GetRolloutDataResponse["data"]["data"]> {
  const items: GetRolloutDataResponse["data"]["data"] = [];
  const seen = new Set<string>();
  await waitUntil(async () => {
    const r = await engine.trainer.getRolloutData({ max_groups: 0 });
    for (const g of r.data.meta_info.finished_groups) seen.add(g);
    items.push(...r.data.data);
    return seen.size >= groups;
  }, `${groups} ready groups`, 60_000);
  return items;
}

describe("rollout buffer through the agent", () => {
  it("launches the workers, delivers their groups, clears dropped sessions upstream, restarts and stops them", { timeout: 180_000 }, async () => {
    await engine.operator.configureBuffer({ ttl_seconds: 2 });
    const command = ["env", `ROLLOUT_CLIENT_TOKEN=${engine.tokens.client}`, process.execPath, WORKER, "{engine_url}", "{job_session}", "{group_size}"];
    const agent = await runAgent(testConfig(ex.url, engine, dir.path, { rolloutCommand: command, inferenceAdminUrl: upstreamUrl }));
    try {
      await engine.trainer.startRollout({ num_repeat_per_sample: 2, job_session: "job-1" });
      const items = await pullGroups(2);
      expect(items).toHaveLength(8); // 2 groups x 2 sessions x 2 steps
      expect(new Set(items.map((i) => i.instance_id))).toEqual(new Set(["job-1-a", "job-1-b"]));
      // The terminal reward of each session reaches all of its steps.
      for (const i of items) expect(i.reward).toBe(String(i.extra_info["session_id"]).endsWith("s0") ? 1 : 2);
      const pid = agent.rollout.workers.status().pid as number;
      expect(groupAlive(pid)).toBe(true);
      // The agent's heartbeat tells the engine (and so the dashboard) that they run.
      const seen = await waitUntil(async () => (await engine.viewer.overview()).agent.rollout_workers, "the workers in a heartbeat", 30_000);
      expect(seen).toMatchObject({ state: "running", pid, job_session: "job-1" });

      // The never-finished group is dropped by the engine's alarm after its TTL, and the upstream is told.
      await waitUntil(() => cleared.find((c) => c.reason === "incomplete_group_ttl"), "clear_sessions at the upstream", 60_000);
      expect(cleared).toContainEqual({ session_ids: ["job-1-c-s0"], reason: "incomplete_group_ttl", group_ids: ["job-1-c"] });
      expect((await engine.viewer.health()).buffer).toMatchObject({ dropped_groups: 1, delivered_groups: 2 });

      // A second start while they run changes nothing, as in the seed.
      await engine.trainer.startRollout({ num_repeat_per_sample: 2, job_session: "job-x" });
      await waitUntil(() => agent.lines.some((l) => l.includes("rollout workers are already running")), "the already-running answer", 30_000);
      expect(agent.rollout.workers.status()).toMatchObject({ pid, job_session: "job-1" });

      // restart_training replaces them.
      await engine.trainer.startRollout({ num_repeat_per_sample: 2, job_session: "job-2", restart_training: true });
      const next = await pullGroups(2);
      expect(new Set(next.map((i) => i.instance_id))).toEqual(new Set(["job-2-a", "job-2-b"]));
      expect(groupAlive(pid)).toBe(false);
      const newPid = agent.rollout.workers.status().pid as number;
      expect(newPid).not.toBe(pid);

      await agent.stop({ stopTrainer: true });
      expect(groupAlive(newPid)).toBe(false);
    } finally {
      await agent.stop({ stopTrainer: true });
      if (process.env["AGENT_TEST_LOG"]) process.stderr.write(agent.lines.join("\n"));
    }
  });
});
