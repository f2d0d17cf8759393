/**
 * npm run bench:agent [-- --quick] [-- --out FILE]
 *
 * Measures the local-agent (run as its CLI, in its own process) three ways:
 *  1. delivery latency, from end_episode's answer to the runner's ack, with 128 concurrent
 *     episodes, through the real Worker (Miniflare) and ZeroMQ;
 *  2. how many requests reach the Worker for the trainer's calls: 128 runner threads
 *     polling is_episode_claimed about once a second, with a burst of registrations at each
 *     training step, for several coalescing windows;
 *  3. the agent's resident memory over 100,000 deliveries (synthetic engine, see
 *     synthetic-engine.ts), sampled every 10,000.
 * Prints one JSON document (and writes it to --out when given).
 */
import { writeFileSync } from "node:fs";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { closedLoop } from "../load/closed-loop";
import { agentEnv, serveAgent, type AgentTarget } from "../serve/agent";
import { serveExchange, type EngineAccess, type ExchangeTarget } from "../serve/exchange";
import { summarize } from "../stats";
import { RepPeers } from "./rep-peers";
import { SyntheticEngine } from "./synthetic-engine";

const quick = process.argv.includes("--quick");

const EPISODES = 128;
const ROUNDS = quick ? 2 : 8;
const RATIO_SECONDS = quick ? 6 : 24;
const STEP_SECONDS = quick ? 3 : 8;
const WINDOWS = quick ? [0, 50] : [0, 20, 50, 100];
const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const DELIVERIES = Number(arg("--deliveries") ?? (quick ? 10_000 : 100_000));
/** Run one part only: latency, ratio or memory. */
const only = arg("--only");
/** Extra Node flags for the measured agent (e.g. a heap cap, to tell a leak from lazy GC). */
const agentNodeOptions = arg("--agent-node-options");

const log = (m: string): void => void process.stderr.write(`[bench:agent] ${m}\n`);
const now = (): number => performance.timeOrigin + performance.now();

/** The agent for `engine` on the exchange `server`, its files under `dir`. */
const engineAgentEnv = (server: string, engine: EngineAccess, dir: string, over: Record<string, string> = {}) => agentEnv({ server, engine: engine.name, trainerToken: engine.trainerToken, dir }, over);

async function startAgent(env: Record<string, string>): Promise<{ agent: AgentTarget; facade: string }> {
  const agent = await serveAgent(env);
  return { agent, facade: agent.facade };
}

const stopAgent = (agent: AgentTarget): Promise<void> => agent.stop(30_000);

async function postJson(url: string, body: unknown): Promise<unknown> {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return res.json();
}

/** 1. end_episode answer -> runner ack, 128 episodes at a time. */
async function deliveryLatency(ex: ExchangeTarget, dir: string) {
  const engine = await ex.newEngine("e");
  const [trainer, client] = [engine.as("trainer"), engine.as("client")];
  const peers = new RepPeers();
  await peers.start(EPISODES);
  const { agent, facade } = await startAgent(engineAgentEnv(ex.url, engine, dir));
  await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING" });
  const samples: number[] = [];
  let missing = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const ids = Array.from({ length: EPISODES }, (_, i) => `r${round}-ep${i}`);
    await Promise.all(ids.map((id, i) => postJson(`${facade}/register_episode`, { episode_uuid: id, zmq_listen_result_addr: peers.addrs[i] })));
    const claims = await Promise.all(ids.map((_, i) => client.claimEpisode({ client_uuid: `c${i}`, episode_type: "train", discard_episode_timeout: 600 })));
    const answered = new Map<string, number>();
    await Promise.all(
      claims.map(async (c, i) => {
        const id = c.episode_uuid;
        await client.endEpisode({ client_uuid: `c${i}`, episode_uuid: id, workflow_output: { reward: 1, is_success: true, metadata: { task_id: id } }, task_id: id });
        answered.set(id, now());
      }),
    );
    const deadline = Date.now() + 30_000;
    while (ids.some((id) => !peers.acks.some((a) => a.episode === id)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    for (const id of ids) {
      const ack = peers.acks.find((a) => a.episode === id);
      const t = answered.get(id);
      if (ack === undefined || t === undefined) missing++;
      else samples.push(ack.ackedAt - t);
    }
    log(`latency round ${round + 1}/${ROUNDS}: ${summarize(samples).p50} ms p50 so far`);
  }
  // The same path one episode at a time: the floor under the figures above, without the
  // Worker busy answering 127 other ends.
  const single: number[] = [];
  for (let i = 0; i < (quick ? 8 : 32); i++) {
    const id = `single-${i}`;
    await postJson(`${facade}/register_episode`, { episode_uuid: id, zmq_listen_result_addr: peers.addrs[0] });
    await client.claimEpisode({ client_uuid: "solo", episode_type: "train", discard_episode_timeout: 600 });
    await client.endEpisode({ client_uuid: "solo", episode_uuid: id, workflow_output: { reward: 1, metadata: { task_id: id } }, task_id: id });
    const t = now();
    const deadline = Date.now() + 10_000;
    let ack = peers.acks.find((a) => a.episode === id);
    while (ack === undefined && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 1));
      ack = peers.acks.find((a) => a.episode === id);
    }
    if (ack) single.push(ack.ackedAt - t);
  }
  await stopAgent(agent);
  peers.close();
  return { episodes_per_round: EPISODES, rounds: ROUNDS, missing, latency_ms: summarize(samples), one_at_a_time_latency_ms: summarize(single) };
}

/** 2. The trainer's calls to the facade vs. the requests the facade makes to the Worker. */
async function callRatio(ex: ExchangeTarget, dir: string, coalesceMs: number) {
  const engine = await ex.newEngine("e");
  const client = engine.as("client");
  const { agent, facade } = await startAgent(engineAgentEnv(ex.url, engine, join(dir, `ratio-${coalesceMs}`), { ROLLOUT_COALESCE_MS: String(coalesceMs) }));
  await engine.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING" });
  const latencies: number[] = [];
  const timed = async (path: string, body: unknown): Promise<void> => {
    const t0 = now();
    await postJson(`${facade}${path}`, body);
    latencies.push(now() - t0);
  };
  let step = 0;
  // Each runner thread: at every training step register a fresh episode (all threads at once:
  // a burst), then poll is_episode_claimed about once a second; at the next step, unregister it.
  const thread = (i: number) => {
    let current = "";
    let stepSeen = -1;
    return async (): Promise<void> => {
      if (stepSeen !== step) {
        stepSeen = step;
        if (current) await timed("/is_episode_claimed", { episode_uuid: current, unregister_if_not_claimed: true });
        current = `s${step}-t${i}`;
        await timed("/register_episode", { episode_uuid: current, zmq_listen_result_addr: `tcp://127.0.0.1:${20000 + i}` });
      }
      await new Promise((r) => setTimeout(r, 900 + Math.random() * 200));
      await timed("/is_episode_claimed", { episode_uuid: current, unregister_if_not_claimed: false });
    };
  };
  // Some clients claim episodes meanwhile, so answers are a mix of true and false.
  const claimer = async (): Promise<void> => {
    await client.claimEpisode({ client_uuid: "claimer", episode_type: "train", discard_episode_timeout: 600 });
    await new Promise((r) => setTimeout(r, 100));
  };
  const stepper = setInterval(() => step++, STEP_SECONDS * 1000);
  const load = closedLoop({ workers: EPISODES + 1, warmupSec: 0, durationSec: RATIO_SECONDS, label: `coalesce ${coalesceMs} ms`, unit: "calls" }, (i) => (i < EPISODES ? thread(i) : claimer));
  await load.done;
  clearInterval(stepper);
  const status = (await (await fetch(`${facade}/_agent/status`)).json()) as { facade: { trainerCalls: number; workerRequests: number } };
  await stopAgent(agent);
  const { trainerCalls, workerRequests } = status.facade;
  return { coalesce_ms: coalesceMs, seconds: RATIO_SECONDS, trainer_calls: trainerCalls, worker_requests: workerRequests, ratio: Math.round((trainerCalls / workerRequests) * 10) / 10, call_latency_ms: summarize(latencies) };
}

function rssKb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m?.[1] ?? 0);
}

/** 3. The agent's RSS while it makes 100,000 deliveries. */
async function memory(dir: string) {
  const peers = new RepPeers(false);
  await peers.start(EPISODES);
  const engine = new SyntheticEngine(DELIVERIES, 512, peers.addrs);
  const url = await engine.listen();
  const env = agentEnv({ server: url, engine: "synthetic", trainerToken: "t", dir: join(dir, "memory") }, { ROLLOUT_POLL_WAIT_SECONDS: "1" });
  if (agentNodeOptions) env["NODE_OPTIONS"] = agentNodeOptions;
  const { agent } = await startAgent(env);
  const pid = agent.pid;
  const samples: Array<{ deliveries: number; rss_mb: number }> = [{ deliveries: 0, rss_mb: Math.round(rssKb(pid) / 102.4) / 10 }];
  const t0 = Date.now();
  let next = DELIVERIES / 10;
  while (engine.acked < DELIVERIES) {
    await new Promise((r) => setTimeout(r, 20));
    if (engine.acked >= next) {
      samples.push({ deliveries: engine.acked, rss_mb: Math.round(rssKb(pid) / 102.4) / 10 });
      log(`memory: ${engine.acked} deliveries, RSS ${samples.at(-1)?.rss_mb} MB`);
      next += DELIVERIES / 10;
    }
  }
  const seconds = (Date.now() - t0) / 1000;
  await stopAgent(agent);
  await engine.close();
  peers.close();
  const afterWarmup = samples.filter((s) => s.deliveries >= DELIVERIES / 10).map((s) => s.rss_mb);
  return {
    deliveries: DELIVERIES,
    runner_acks: peers.count,
    double_acks: engine.doubleAcks,
    failed_acks: engine.failedAcks,
    deliveries_per_second: Math.round(DELIVERIES / seconds),
    rss_mb: samples,
    growth_after_first_10pct_mb: Math.round((Math.max(...afterWarmup) - Math.min(...afterWarmup)) * 10) / 10,
  };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "bench-agent-"));
  const ex = only === "memory" ? null : await serveExchange({ prefix: "bench-agent" });
  try {
    let latency: Awaited<ReturnType<typeof deliveryLatency>> | null = null;
    const ratio: Array<Awaited<ReturnType<typeof callRatio>>> = [];
    if (ex && (only === undefined || only === "latency")) {
      log("1/3 delivery latency");
      latency = await deliveryLatency(ex, dir);
    }
    if (ex && (only === undefined || only === "ratio")) {
      log("2/3 trainer calls vs. Worker requests");
      for (const w of WINDOWS) {
        ratio.push(await callRatio(ex, dir, w));
        log(`coalesce ${w} ms: ratio ${ratio.at(-1)?.ratio}`);
      }
    }
    await ex?.stop();
    let mem: Awaited<ReturnType<typeof memory>> | null = null;
    if (only === undefined || only === "memory") {
      log(`3/3 memory over ${DELIVERIES} deliveries`);
      mem = await memory(dir);
    }
    const result = { machine: { cpus: (await import("node:os")).cpus().length, node: process.version }, quick, delivery: latency, trainer_call_ratio: ratio, memory: mem };
    const text = JSON.stringify(result, null, 2);
    process.stdout.write(text + "\n");
    const outFile = arg("--out");
    if (outFile) writeFileSync(outFile, text + "\n");
  } finally {
    await ex?.stop().catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    process.stderr.write(`bench:agent failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  },
);
