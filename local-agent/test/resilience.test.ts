/**
 * Faults between the agent and the Worker, injected by a proxy in front of the real Worker:
 * refused connections, 5xx answers, no answers at all, lost acks, malformed commands, and a
 * Worker one version newer than the agent (the proxy adds a value the newer protocol has).
 */
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { beforeEach, describe, expect, it } from "vitest";
import { AdminClient, RunsClient } from "../../src/client";
import { realClock, type Clock } from "../src/clock";
import { Reachability } from "../src/reachability";
import { ExchangeReporter } from "../src/runs/exchange-reporter";
import { MemoryLogger } from "./support/logger";
import { runAgent, testConfig } from "./support/agent-harness";
import { ADMIN_TOKEN, type TestEngine } from "./support/exchange";
import { journaledOutcomes } from "./support/journal";
import { ManualClock } from "./support/manual-clock";
import { FaultyProxy } from "./support/proxy";
import { PyRunner } from "./support/py-runner";
import { repPeer } from "./support/rep-peer";
import { exchangeSuite } from "./support/suite";
import { waitUntil } from "./support/wait";

/** Short, so that commands whose ack was lost are handed out again within the test. */
const LEASE_SECONDS = 2;

const t = exchangeSuite({ commandLeaseSeconds: LEASE_SECONDS });
let proxy: FaultyProxy;

beforeEach(async () => {
  proxy = new FaultyProxy(t.ex.url);
  await proxy.listen();
  t.defer(() => proxy.close());
});

async function agent(over: Parameters<typeof testConfig>[3] = {}, clock?: ManualClock) {
  const a = await runAgent(testConfig(proxy.url, t.engine, t.dir, { requestTimeoutSeconds: 1, pollWaitSeconds: 1, retryMaxSeconds: 0.3, ...over }), clock);
  t.defer(() => a.stop());
  return a;
}

/** Rolling engine, `n` episodes registered with runners listening on ipc sockets. */
async function episodes(n: number, prefix: string): Promise<{ runner: PyRunner; ids: string[] }> {
  await t.engine.trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING" });
  const ids = Array.from({ length: n }, (_, i) => `${prefix}-${i}`);
  const runner = new PyRunner({ ipcDir: t.dir, episodes: ids, register: false });
  t.defer(() => runner.kill());
  for (const id of ids) {
    await runner.waitFor("listening", id);
    await t.engine.trainer.registerEpisode({ episode_uuid: id, zmq_listen_result_addr: runner.addr(id) });
  }
  return { runner, ids };
}

async function claimAndEnd(ids: string[]): Promise<void> {
  for (const id of ids) {
    const c = await t.engine.client.claimEpisode({ client_uuid: `c-${id}`, episode_type: "train", discard_episode_timeout: 600 });
    expect(c.episode_uuid).toBe(id);
    expect(await t.engine.client.endEpisode({ client_uuid: `c-${id}`, episode_uuid: id, workflow_output: { reward: 1, metadata: { task_id: id } }, task_id: id })).toEqual({ success: true });
  }
}

/** Moves the manual clock on in 100 ms steps, letting the agent's loops run between them, until `done` (at most `maxMs`). */
async function advanceUntil(clock: ManualClock, done: () => boolean, maxMs: number): Promise<void> {
  for (let moved = 0; !done(); moved += 100) {
    if (moved >= maxMs) throw new Error(`not done after ${maxMs} ms of the manual clock`);
    await clock.advance(100);
    await new Promise((r) => setTimeout(r, 5)); // real time for the agent's requests to fail or get through
  }
}

/** Moves the manual clock on by `ms` in 100 ms steps, letting the agent's loops run between them. */
async function advanceBy(clock: ManualClock, ms: number): Promise<void> {
  for (let moved = 0; moved < ms; moved += 100) {
    await clock.advance(100);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const deliveries = async () => (await t.engine.viewer.overview()).deliveries;

describe("the agent and an unreliable Worker", () => {
  it("rides out refused connections, 503s and silence, then resumes and delivers everything", async () => {
    const a = await agent();
    const { runner, ids } = await episodes(6, "out");
    await waitUntil(() => a.lines.some((l) => l.includes("rollout-agent")), "the agent to start");

    for (const fault of ["refuse", "503", "hang"] as const) {
      proxy.fault = () => fault;
      // Once the agent's requests in flight have ended and new ones fail...
      // (a long poll that was already in flight may still hand out commands).
      const seen = proxy.faults("/agent/commands");
      await waitUntil(() => proxy.faults("/agent/commands") >= seen + 1, `the agent's polls to hit ${fault}`);
      // ...results are accepted by the engine while the agent cannot reach it.
      const batch = fault === "refuse" ? ids.slice(0, 2) : fault === "503" ? ids.slice(2, 4) : ids.slice(4);
      await claimAndEnd(batch);
      await waitUntil(() => proxy.faults("/agent/commands") >= seen + 3, `the agent to keep retrying through ${fault}`);
      expect(runner.of("result").filter((e) => batch.includes(e.episode ?? ""))).toEqual([]);
      proxy.fault = () => "pass";
      for (const id of batch) await runner.waitFor("acked", id);
    }
    await waitUntil(async () => (await deliveries()).delivered === 6, "all six deliveries to be acked");
    expect(await deliveries()).toMatchObject({ pending: 0, undeliverable: 0 });
    for (const id of ids) expect(runner.of("result", id)).toHaveLength(1);
    expect(a.lines.filter((l) => /cannot reach the exchange at .* retrying with backoff/.test(l)).length).toBeGreaterThanOrEqual(3);
    expect(a.lines.filter((l) => /the exchange is reachable again after [\d.]+ s; resuming where the agent left off/.test(l)).length).toBeGreaterThanOrEqual(3);
  });

  it("resumes every loop once one request gets through after an outage: a poll deep in its backoff does not sleep it out", async () => {
    const clock = new ManualClock(Date.now());
    // The default retry ceiling: a poll that failed a few times waits 15-30 s before its next try.
    const a = await agent({ retryMaxSeconds: 30, heartbeatSeconds: 1 }, clock);
    const { runner, ids } = await episodes(1, "idle");
    await waitUntil(() => a.lines.some((l) => l.includes("rollout-agent")), "the agent to start");
    proxy.fault = () => "refuse";
    // The long poll under way when the outage began is answered; the next one is refused.
    await waitUntil(() => proxy.faults("/agent/commands") >= 1, "a poll to be refused");
    // The outage lasts until the poll's backoff is longer than any other wait of the agent (the
    // log rotation's 5 s); the heartbeat, every second of the manual clock, keeps failing meanwhile.
    const longest = () => Math.max(...clock.pending);
    await advanceUntil(clock, () => longest() > 5000, 60_000);
    await claimAndEnd(ids);

    proxy.fault = () => "pass";
    const recoveries = () => a.lines.filter((l) => /the exchange is reachable again after/.test(l)).length;
    const seen = recoveries();
    // The heartbeat gets through within its next beats, well before the poll's next try.
    await advanceUntil(clock, () => recoveries() > seen, longest() - 1000);
    // No more time passes: the poll must go at once, and the result reach its runner.
    await runner.waitFor("acked", ids[0], 5000);
    expect(longest()).toBeLessThanOrEqual(5000);
  });

  it("waits out a 429's Retry-After before it acks again, though heartbeats get through meanwhile", async () => {
    // The exchange limits requests per token, the agent's loops together: an ack sent again
    // after its own 0.5 s backoff, or at the next heartbeat's answer, kept the token limited.
    const clock = new ManualClock(Date.now());
    const a = await agent({ retryMaxSeconds: 30, heartbeatSeconds: 1 }, clock);
    const { runner, ids } = await episodes(1, "limited-ack");
    await waitUntil(() => a.lines.some((l) => l.includes("rollout-agent")), "the agent to start");
    proxy.fault = (p) => (p.endsWith("/agent/ack") ? "429" : "pass"); // Retry-After: 7
    await claimAndEnd(ids);
    await waitUntil(() => proxy.faults("/agent/ack") === 1, "the ack to be rate limited");
    const beats = proxy.count("/agent/heartbeat");
    await advanceBy(clock, 6900);
    expect(proxy.faults("/agent/ack")).toBe(1);
    expect(proxy.count("/agent/heartbeat")).toBeGreaterThan(beats);
    proxy.fault = () => "pass";
    await advanceUntil(clock, () => proxy.count("/agent/ack") > 0, 2000);
    await waitUntil(async () => (await deliveries()).delivered === 1, "the ack to land");
    expect(runner.of("result", ids[0])).toHaveLength(1);
  });

  it("waits out a 429's Retry-After before it polls again", async () => {
    const clock = new ManualClock(Date.now());
    const a = await agent({ retryMaxSeconds: 30, heartbeatSeconds: 1 }, clock);
    await waitUntil(() => a.lines.some((l) => l.includes("rollout-agent")), "the agent to start");
    proxy.fault = (p) => (p.endsWith("/agent/commands") ? "429" : "pass");
    await waitUntil(() => proxy.faults("/agent/commands") === 1, "a poll to be rate limited");
    await advanceBy(clock, 6900);
    expect(proxy.faults("/agent/commands")).toBe(1);
    await advanceUntil(clock, () => proxy.faults("/agent/commands") === 2, 2000);
  });

  it("backs off from a server that answers a login page instead of the exchange, saying so once", async () => {
    proxy.fault = () => "login-page";
    // The defaults a host runs with: retries up to 30 s apart, a heartbeat every 10 s.
    const a = await agent({ retryMaxSeconds: 30, heartbeatSeconds: 10 });
    await waitUntil(() => proxy.faults("/agent/commands") >= 1, "a poll to meet the page");
    const begun = proxy.faulted.length;
    // Backoff from 0.25-0.5 s lets the poll try about five times in 3 s, and the heartbeat once.
    // Were each page taken for the exchange answering, each would end the outage the last one
    // began and wake every loop: thousands of requests a second.
    await new Promise((r) => setTimeout(r, 3000));
    expect(proxy.faulted.length - begun).toBeLessThan(20);
    expect(a.lines.filter((l) => l.includes("cannot reach the exchange")).length).toBe(1);
    expect(a.lines.some((l) => l.includes("reachable again"))).toBe(false);
  });

  it("never delivers a result twice when its ack is lost: the redelivered command is answered from the journal", async () => {
    const a = await agent();
    const { runner, ids } = await episodes(3, "lost-ack");
    proxy.fault = (p) => (p.endsWith("/agent/ack") ? "503" : "pass");
    await claimAndEnd(ids);
    for (const id of ids) await runner.waitFor("acked", id);
    // The engine hands the unacked commands out again after their lease; the agent must not re-send them.
    await waitUntil(() => a.lines.some((l) => /was handed out again but had already finished; re-sending its ack/.test(l)), "a redelivery", 3 * LEASE_SECONDS * 1000);
    proxy.fault = () => "pass";
    await waitUntil(async () => (await deliveries()).delivered === 3, "the acks to land");
    expect((await deliveries()).undeliverable).toBe(0);
    for (const id of ids) expect(runner.of("result", id)).toHaveLength(1);
  });

  it("never runs a command again whose redelivery crossed its ack: the journal remembers acked outcomes", async () => {
    // Deadlines long enough for the held requests: each is answered once, not timed out and retried.
    await agent({ requestTimeoutSeconds: 10 });
    await t.engine.trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING" });
    // A runner that keeps listening, so that a second delivery would be received.
    const peer = await repPeer();
    t.defer(() => peer.close());
    await t.engine.trainer.registerEpisode({ episode_uuid: "crossed", zmq_listen_result_addr: peer.addr });
    // The ack waits until the engine has handed the command out again (its lease ran out), and
    // that poll's answer waits until the ack's answer has reached the agent.
    let handedOut = 0;
    proxy.hold = async (path, phase, body) => {
      if (path.endsWith("/agent/ack") && phase === "request") await waitUntil(() => handedOut >= 2, "the command to be handed out again", 4 * LEASE_SECONDS * 1000);
      if (path.endsWith("/agent/commands") && phase === "answer" && body.includes('"kind":"deliver"') && ++handedOut >= 2) {
        await waitUntil(() => proxy.answered("/agent/ack") >= 1, "the ack's answer");
      }
    };
    await claimAndEnd(["crossed"]);
    await waitUntil(() => peer.received.length >= 1, "the result to reach the runner");
    await waitUntil(async () => (await deliveries()).delivered === 1, "the ack to land");
    // The redelivered command is answered from the journal: its ack is re-sent, the runner is left alone.
    await waitUntil(() => proxy.answered("/agent/ack") >= 2, "the re-sent ack", 4 * LEASE_SECONDS * 1000);
    expect(peer.received).toHaveLength(1);
  });

  it("keeps finished outcomes across an agent restart and acks them then", async () => {
    const first = await agent();
    const { runner, ids } = await episodes(2, "restart");
    proxy.fault = (p) => (p.endsWith("/agent/ack") ? "refuse" : "pass");
    await claimAndEnd(ids);
    for (const id of ids) await runner.waitFor("acked", id);
    // The runner's ack reaches the agent a moment later, and only then is the outcome journaled:
    // stopping before both are on disk would leave one to be delivered again, not re-acked.
    await waitUntil(() => journaledOutcomes(join(t.dir, "state")) === 2, "both outcomes in the agent's journal");
    await first.stop();
    proxy.fault = () => "pass";
    const second = await agent();
    expect(second.lines.some((l) => l.includes("re-sending 2 acks of commands finished before the restart"))).toBe(true);
    await waitUntil(async () => (await deliveries()).delivered === 2, "the journaled acks to land");
    expect((await deliveries()).undeliverable).toBe(0);
    for (const id of ids) expect(runner.of("result", id)).toHaveLength(1);
  });

  it("acks a malformed command as failed, in plain words, and carries on", async () => {
    let mangled = 0;
    proxy.transform = (path, body) => {
      if (!path.endsWith("/agent/commands")) return body;
      const json = JSON.parse(body.toString()) as { commands: Array<{ seq: number; body: { kind: string } }> };
      for (const c of json.commands) {
        if (c.body.kind === "start") {
          c.body.kind = "teleport";
          mangled++;
        }
      }
      if (json.commands.length > 0 && mangled === 1) json.commands.push({ body: { kind: "?" } } as never); // no seq at all
      return Buffer.from(JSON.stringify(json));
    };
    const a = await agent({ trainerCommand: ["true"] });
    await t.engine.operator.syncTrainConfig("x: 1\n");
    await t.engine.operator.startEngine();
    await waitUntil(async () => (await t.engine.viewer.getEngineStatus()).engine_status === "ENGINE.OFFLINE", "the engine to learn the start failed");
    expect((await t.engine.viewer.getEngineStatus()).engine_status_detail).toMatch(
      /^trainer failed to start: malformed command, not executed: body.kind: .*\(this agent is version [\d.]+; a newer exchange may need a newer agent\)$/,
    );
    expect(a.lines.some((l) => /error ignoring a command without a usable seq/.test(l))).toBe(true);
    expect(a.trainer.status().state).toBe("idle");
    // The loop goes on: a result still gets through.
    proxy.transform = (_p, b) => b;
    const { runner, ids } = await episodes(1, "after-bad");
    await claimAndEnd(ids);
    await runner.waitFor("acked", ids[0]);
  });

  it("lets a delivery its runner already has finish when the agent stops, so the result is acked, not sent again to a runner that stopped listening", async () => {
    // The runner takes the result, then acks it 1.5 s later (AgentJet's acks once and stops listening).
    await t.engine.trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING" });
    const runner = new PyRunner({ ipcDir: t.dir, episodes: ["slow-ack"], register: false, ackDelay: 1.5 });
    t.defer(() => runner.kill());
    await runner.waitFor("listening", "slow-ack");
    await t.engine.trainer.registerEpisode({ episode_uuid: "slow-ack", zmq_listen_result_addr: runner.addr("slow-ack") });
    const a = await agent({ deliveryTimeoutSeconds: 5, deliveryAttempts: 1 });
    await claimAndEnd(["slow-ack"]);
    await runner.waitFor("result", "slow-ack");
    // The operator restarts the agent (an upgrade) while the runner holds the result.
    await a.stop();
    expect(runner.of("acked", "slow-ack")).toHaveLength(1);
    expect(a.lines.some((l) => /waiting for 1 result delivery under way to be acked by its runner \(at most 6 s\)/.test(l))).toBe(true);
    await waitUntil(async () => (await deliveries()).delivered === 1, "the delivery to be acked to the engine");
    expect(await deliveries()).toMatchObject({ pending: 0, undeliverable: 0 });
  });

  it("tells the engine it is connected through heartbeats, and that it left once they stop", async () => {
    const a = await agent({ heartbeatSeconds: 0.2 });
    await waitUntil(async () => (await t.engine.viewer.overview()).agent.connected, "the engine to see the agent");
    const o = (await t.engine.viewer.overview()).agent;
    expect(o).toMatchObject({ agent_id: "test-agent", pid: process.pid, trainer_state: "idle", version: "0.1.0" });
    await a.stop();
    const seen = (await t.engine.viewer.overview()).agent.last_seen as number;
    expect(seen).toBeGreaterThan(Date.now() / 1000 - 5);
  });

  it("sends a heartbeat the exchange fails alone (a 5xx of its own, while polls get through) once a beat, not again after each poll", async () => {
    proxy.fault = (path) => (path.endsWith("/agent/heartbeat") ? "503" : "pass");
    // Polls answered at once, one after another: each would have woken the failed heartbeat.
    const a = await agent({ heartbeatSeconds: 2, pollWaitSeconds: 0 });
    await waitUntil(() => proxy.count("/agent/commands") >= 1, "a poll to get through");
    await new Promise((r) => setTimeout(r, 3000));
    expect(proxy.count("/agent/commands")).toBeGreaterThan(10);
    // The first, one more as the polls get through after it (it may have been an outage), and the next beat.
    expect(proxy.faults("/agent/heartbeat")).toBeGreaterThanOrEqual(2);
    expect(proxy.faults("/agent/heartbeat")).toBeLessThanOrEqual(4);
    expect(a.lines.filter((l) => l.includes("cannot reach the exchange")).length).toBeLessThanOrEqual(4);
  });

  it("keeps the report of a trainer's exit the exchange refuses 401 while its token is replaced, and sends it until taken", async () => {
    const refusals = 3;
    proxy.fault = (path) => (path.endsWith("/agent/trainer_exit") && proxy.faults("/agent/trainer_exit") < refusals ? "bad-token" : "pass");
    const a = await agent({ trainerCommand: ["sh", join(import.meta.dirname, "fixtures", "trainer-exits-3.sh")] });
    t.defer(() => a.stop({ stopTrainer: true }));
    await t.engine.operator.syncTrainConfig("x: 1\n");
    await t.engine.operator.startEngine();
    await waitUntil(async () => (await t.engine.viewer.getEngineStatus()).engine_status === "ENGINE.OFFLINE", "the engine to go OFFLINE", 20_000);
    expect((await t.engine.viewer.getEngineStatus()).engine_status_detail).toMatch(/^trainer exited with code 3; last output:/);
    expect(proxy.faults("/agent/trainer_exit")).toBe(refusals);
    // Said once, not once a try.
    expect(a.lines.filter((l) => /the exchange refused the trainer-exit report \(.*401.*\); retrying/.test(l))).toHaveLength(1);
  });

  it("keeps the report of a trainer's exit across an agent restart, and the next agent sends it", async () => {
    // The exchange fails the report until the agent stops (an upgrade, a host reboot): the engine
    // would believe the trainer runs, BOOTING or ROLLING for ever, its clients claiming for nobody.
    proxy.fault = (path) => (path.endsWith("/agent/trainer_exit") ? "503" : "pass");
    const first = await agent({ trainerCommand: ["sh", join(import.meta.dirname, "fixtures", "trainer-exits-3.sh")] });
    await t.engine.operator.syncTrainConfig("x: 1\n");
    await t.engine.operator.startEngine();
    await waitUntil(() => proxy.faults("/agent/trainer_exit") > 0, "the exit report to be tried");
    await first.stop();
    expect((await t.engine.viewer.getEngineStatus()).engine_status).toBe("ENGINE.BOOTING");
    proxy.fault = () => "pass";
    const second = await agent();
    await waitUntil(async () => (await t.engine.viewer.getEngineStatus()).engine_status === "ENGINE.OFFLINE", "the engine to go OFFLINE", 20_000);
    expect((await t.engine.viewer.getEngineStatus()).engine_status_detail).toMatch(/^trainer exited with code 3; last output:/);
    expect(second.lines.some((l) => l.includes("re-sending the report of a trainer exit"))).toBe(true);
    // Taken: a third agent has nothing to send.
    await second.stop();
    const third = await agent();
    await third.stop();
    expect(third.lines.some((l) => l.includes("re-sending the report of a trainer exit"))).toBe(false);
  });

  it("says, once, that this host's clock is off the exchange's and by how much (the gateway refuses calls signed 300 s off), and when it is right again", async () => {
    // The host's clock an hour fast, as the agent reads it; the exchange's is the real one.
    const skew = { ms: 3_600_000 };
    const clock: Clock = { now: () => Date.now() + skew.ms, sleep: realClock.sleep };
    const a = await runAgent(testConfig(t.ex.url, t.engine, t.dir, { heartbeatSeconds: 0.1 }), clock);
    t.defer(() => a.stop());
    const said = (what: RegExp): string[] => a.lines.filter((l) => what.test(l));
    await waitUntil(() => said(/this host's clock is 3600 s ahead of the exchange's: the gateway refuses every relayed call/).length > 0, "the agent to say its clock is an hour off");
    skew.ms = 45_000;
    await waitUntil(() => said(/this host's clock is 45 s ahead of the exchange's; past 300 s the gateway refuses/).length > 0, "a warning of 45 s");
    skew.ms = -200;
    await waitUntil(() => said(/clock agrees with the exchange's again/).length > 0, "the all-clear");
    // Once each, not once a heartbeat.
    expect(said(/this host's clock/)).toHaveLength(3);
  });
});

/** A stand-in inference upstream that keeps the bodies of POST /admin/clear_sessions. */
async function adminUpstream(): Promise<{ url: string; cleared: unknown[] }> {
  const cleared: unknown[] = [];
  const server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.url === "/admin/clear_sessions") cleared.push(JSON.parse(Buffer.concat(chunks).toString()));
      res.writeHead(200, { "content-type": "application/json" }).end('{"cleared":true}');
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  t.defer(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, cleared };
}

/** A run started on the engine, and a reporter sending its reports through the proxy. */
async function runReportedThroughProxy(): Promise<{ runId: string; reporter: ExchangeReporter; logger: MemoryLogger }> {
  const trainer = new RunsClient({ baseUrl: t.engine.baseUrl, token: t.engine.tokens.trainer });
  const operator = new RunsClient({ baseUrl: t.engine.baseUrl, token: t.engine.tokens.operator });
  await trainer.reportCatalog({ environments: [{ name: "gsm8k", class_name: "GSM8kEnv", file_path: "/opt/envs/gsm8k_server.py", fields: [] }] });
  await operator.selectEnvironment({ name: "gsm8k" });
  const runId = (await operator.startRun()).run_id;
  const logger = new MemoryLogger();
  const stop = new AbortController();
  t.defer(() => stop.abort());
  const reporter = new ExchangeReporter(new RunsClient({ baseUrl: `${proxy.url}/e/${t.engine.name}`, token: t.engine.tokens.trainer }), {
    reach: new Reachability(logger, realClock, t.engine.baseUrl),
    logger,
    stop: stop.signal,
    maxBackoffMs: 200,
  });
  return { runId, reporter, logger };
}

/** The reporter's answer to a starting report, or what stands for none within 5 s (a report retried on and on). */
const reportStarting = (reporter: ExchangeReporter, runId: string) =>
  Promise.race([
    reporter.report(runId, { status: "starting", detail: "starting 1 process", processes: [], metrics: [], agent_id: "host-1" }),
    new Promise<"no answer after 5 s">((r) => setTimeout(() => r("no answer after 5 s"), 5000)),
  ]);

describe("an agent older than its Worker", () => {
  it("carries out a clear_sessions whose reason a newer Worker added, passing the reason on", async () => {
    proxy.transform = (path, body) => {
      if (!path.endsWith("/agent/commands")) return body;
      const json = JSON.parse(body.toString()) as { commands: Array<{ body: { kind: string; reason?: string } }> };
      for (const c of json.commands) if (c.body.kind === "clear_sessions") c.body.reason = "group_superseded";
      return Buffer.from(JSON.stringify(json));
    };
    const upstream = await adminUpstream();
    await agent({ inferenceAdminUrl: upstream.url });
    // A group of 2 delivered with one session left incomplete: the engine queues clear_sessions for s3.
    const row = (session: string, done: boolean) => ({ session_id: session, group_id: "g", step_index: 0, messages: [{ role: "user", content: session }], response: "r", reward: 1, is_session_completed: done });
    await t.engine.trainer.startRollout({ num_repeat_per_sample: 2, job_session: "job-1" });
    await t.engine.client.postSteps({ steps: [row("s1", true), row("s2", true), row("s3", false)] });
    await t.engine.trainer.getRolloutData();
    await waitUntil(
      async () => upstream.cleared.length > 0 || (await t.engine.viewer.overview()).refusals.some((r) => r.kind === "clear_sessions"),
      "the agent to clear the sessions or refuse the command",
    );
    const refusals = (await t.engine.viewer.overview()).refusals.filter((r) => r.kind === "clear_sessions");
    expect({ cleared: upstream.cleared, refusals }).toEqual({ cleared: [{ session_ids: ["s3"], group_ids: ["g"], reason: "group_superseded" }], refusals: [] });
  });

  it("takes a run report's answer naming a run status a newer Worker added, sending the report once", async () => {
    const { runId, reporter, logger } = await runReportedThroughProxy();
    proxy.transform = (path, body) => (path.includes("/runs/agent/runs/") ? Buffer.from(JSON.stringify({ ...(JSON.parse(body.toString()) as object), status: "queued" })) : body);
    const answer = await reportStarting(reporter, runId);
    expect({ answer, sent: proxy.count(`/runs/agent/runs/${runId}`), log: logger.lines }).toEqual({ answer: { run_id: runId, status: "queued", must_stop: false }, sent: 1, log: [] });
  });

  it("does not send a report again whose answer it cannot read (the Worker took it), and says an upgrade may be needed", async () => {
    const { runId, reporter, logger } = await runReportedThroughProxy();
    proxy.transform = (path, body) => {
      if (!path.includes("/runs/agent/runs/")) return body;
      const { must_stop: _dropped, ...rest } = JSON.parse(body.toString()) as Record<string, unknown>;
      return Buffer.from(JSON.stringify(rest));
    };
    const answer = await reportStarting(reporter, runId);
    expect({ answer, sent: proxy.count(`/runs/agent/runs/${runId}`), log: logger.lines.map((l) => /unreadable_answer: .*must_stop.*newer client or agent/.test(l)) }).toEqual({
      answer: { refused: 200 },
      sent: 1,
      log: [true],
    });
  });
});

describe("acks the exchange refuses, and the journal across engines", () => {
  const fast = { requestTimeoutSeconds: 2, pollWaitSeconds: 1, retryMaxSeconds: 0.3, deliveryTimeoutSeconds: 0.5, deliveryAttempts: 2 };

  it("keeps an ack refused 401 while the token is replaced, and the agent restarted with the new token acks it instead of delivering again", async () => {
    const admin = new AdminClient({ origin: t.ex.url, adminToken: ADMIN_TOKEN });
    const oldId = (await admin.listTokens(t.engine.name)).tokens.find((x) => x.role === "trainer")!.id;
    const replacement = await admin.issueToken(t.engine.name, "trainer", "replacement");

    const first = await runAgent(testConfig(proxy.url, t.engine, t.dir, fast));
    await t.engine.trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING" });
    const runner = new PyRunner({ ipcDir: t.dir, episodes: ["ep-1"], register: false });
    t.defer(() => runner.kill());
    await runner.waitFor("listening", "ep-1");
    await t.engine.trainer.registerEpisode({ episode_uuid: "ep-1", zmq_listen_result_addr: runner.addr("ep-1") });

    // The operator revokes the agent's token (to replace it) just as the agent acks the delivery.
    let revoked = false;
    proxy.hold = async (path, phase) => {
      if (path.endsWith("/agent/ack") && phase === "request" && !revoked) {
        revoked = true;
        await admin.revokeToken(t.engine.name, oldId);
      }
    };
    await claimAndEnd(["ep-1"]);
    await runner.waitFor("acked", "ep-1");
    await waitUntil(() => first.lines.some((l) => /refused the ack of command \d+/.test(l)), "the ack to be refused");
    await first.stop();
    expect(journaledOutcomes(join(t.dir, "state"))).toBe(1);

    // Restarted with the new token, same state directory.
    const second = await runAgent(testConfig(proxy.url, { ...t.engine, tokens: { ...t.engine.tokens, trainer: replacement.token } }, t.dir, fast));
    t.defer(() => second.stop());
    expect(second.lines.some((l) => l.includes("re-sending 1 ack of commands finished before the restart"))).toBe(true);
    await waitUntil(async () => (await t.engine.viewer.overview()).pending_commands === 0, "the command to be acked", 20_000);
    expect(runner.of("result", "ep-1")).toHaveLength(1);
    // The runner has its result: the engine must not call it undeliverable.
    expect(await deliveries()).toMatchObject({ delivered: 1, undeliverable: 0 });
  });

  async function deliverOne(engine: TestEngine, episode: string, addr: string): Promise<void> {
    await engine.trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING" });
    await engine.trainer.registerEpisode({ episode_uuid: episode, zmq_listen_result_addr: addr });
    const c = await engine.client.claimEpisode({ client_uuid: `c-${episode}`, episode_type: "train", discard_episode_timeout: 600 });
    expect(c.episode_uuid).toBe(episode);
    expect(await engine.client.endEpisode({ client_uuid: `c-${episode}`, episode_uuid: episode, workflow_output: { reward: 1, metadata: { task_id: episode } }, task_id: episode })).toEqual({ success: true });
  }

  it("does not answer another engine's command with the same seq from an outcome journaled for the first", async () => {
    const state = join(t.dir, "state");
    const engineA = t.engine;
    // Engine A: a result delivered, its ack lost (the Worker unreachable for acks), then the agent is stopped.
    const peerA = await repPeer();
    t.defer(() => peerA.close());
    proxy.fault = (p) => (p.endsWith("/agent/ack") ? "refuse" : "pass");
    const first = await runAgent(testConfig(proxy.url, engineA, t.dir, { requestTimeoutSeconds: 1, pollWaitSeconds: 1, retryMaxSeconds: 0.3 }));
    await deliverOne(engineA, "ep-a", peerA.addr);
    await waitUntil(() => peerA.received.length === 1 && journaledOutcomes(state) === 1, "engine A's result delivered and journaled");
    await first.stop();
    proxy.fault = () => "pass";

    // The host now serves engine B, same state directory. B's first result (seq 1 too) is waiting for the agent.
    const engineB = await t.ex.newEngine();
    const peerB = await repPeer();
    t.defer(() => peerB.close());
    await deliverOne(engineB, "ep-b", peerB.addr);
    const second = await runAgent(testConfig(proxy.url, engineB, t.dir, { requestTimeoutSeconds: 1, pollWaitSeconds: 1, retryMaxSeconds: 0.3 }));
    t.defer(() => second.stop());
    // B's command is carried out, not answered from A's outcome: its runner gets the result, then B has the ack.
    await waitUntil(() => peerB.received.length === 1, "engine B's result to reach its runner");
    await waitUntil(async () => (await engineB.viewer.overview()).pending_commands === 0, "engine B's command to be acked");
    expect((await engineB.viewer.overview()).deliveries).toMatchObject({ delivered: 1, undeliverable: 0 });
    // A's outcome is still owed to A, should the host serve it again.
    expect(journaledOutcomes(state)).toBe(1);
  });

  it("runs the command of an engine made again under the same name, not answering it from the deleted engine's outcome of that seq, whose ack it drops", async () => {
    const state = join(t.dir, "state");
    const fastish = { requestTimeoutSeconds: 1, pollWaitSeconds: 1, retryMaxSeconds: 0.3 };
    // The first engine of the name: a result delivered, its ack lost (the Worker unreachable for acks), then the agent is stopped.
    const peerOld = await repPeer();
    t.defer(() => peerOld.close());
    proxy.fault = (p) => (p.endsWith("/agent/ack") ? "refuse" : "pass");
    const first = await runAgent(testConfig(proxy.url, t.engine, t.dir, fastish));
    await deliverOne(t.engine, "ep-old", peerOld.addr);
    await waitUntil(() => peerOld.received.length === 1 && journaledOutcomes(state) === 1, "the first engine's result delivered and journaled");
    await first.stop();
    proxy.fault = () => "pass";

    // The engine is deleted and made again under its name (same URL, new tokens); its first result, seq 1 again, waits for the agent.
    const again = await t.ex.remakeEngine(t.engine);
    const peerNew = await repPeer();
    t.defer(() => peerNew.close());
    await deliverOne(again, "ep-new", peerNew.addr);
    const second = await runAgent(testConfig(proxy.url, again, t.dir, fastish));
    t.defer(() => second.stop());
    // The new engine's command is carried out: its runner gets the result, then the engine has the ack.
    await waitUntil(() => peerNew.received.length === 1, "the new engine's result to reach its runner");
    await waitUntil(async () => (await again.viewer.overview()).pending_commands === 0, "the new engine's command to be acked");
    expect((await again.viewer.overview()).deliveries).toMatchObject({ delivered: 1, undeliverable: 0 });
    // The ack owed to the deleted engine was re-sent, refused as another incarnation's, and dropped: nothing is owed any more.
    expect(second.lines.some((l) => /refused the ack of command \d+ \(404 .*earlier engine of the same name.*\) and can never take it; dropping it/.test(l))).toBe(true);
    expect(second.lines.some((l) => l.includes("was handed out again but had already finished"))).toBe(false);
    expect(journaledOutcomes(state)).toBe(0);
    expect(peerOld.received).toHaveLength(1);
  });
});
