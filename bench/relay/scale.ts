/**
 * npm run bench:relay-scale [-- --quick] [-- --claims N] [-- --seconds S] [-- --rounds R] [-- --out FILE]
 *
 * How far one engine's relay scales (the Worker's claim gate, src/relay/claim-gate.ts):
 *
 * 1. Steady state: N live claims (1,000) each call a zero-latency model continuously, through
 *    the exchange (Worker, engine, the agent's gateway) and, in alternating rounds, through the
 *    relay's floor (a bare Worker and a bare proxy, ./floor). Reported: relayed calls/s against
 *    the floor's, and the engine's requests per relayed call, read from the engine's own
 *    counters (overview.relay).
 * 2. A saturated engine: the `npm run bench` load (claim -> end -> register loops) on the same
 *    engine, in alternating rounds alone and with 64 claims calling a 1 s model through the
 *    relay meanwhile. Reported: cycles/s with and without the relay traffic, and the relayed
 *    calls that flowed.
 *
 * --capture off|messages|tokens sets the engine's ledger capture (its default, messages, otherwise).
 * Prints one JSON document, and writes it to --out with a chart (FILE.svg) next to it.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { Agent, request } from "undici";
import { startModelServer } from "../../scripts/local/model-server";
import { CaptureMode } from "../../src/protocol/ledger";
import { closedLoop } from "../load/closed-loop";
import { runLoad } from "../loadgen";
import { claimRelayed, relayCounts, serveRelayedEngine } from "../serve/relayed-engine";
import { CLIENT_KEEP_ALIVE_MS } from "../load/http";
import { summarize, type CpuUse, type Latency } from "../stats";
import { startRelayFloor } from "./floor/serve";
import { renderScaleChart } from "./scale-chart";

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const quick = process.argv.includes("--quick");
const CLAIMS = Number(arg("--claims") ?? 1000);
const SECONDS = Number(arg("--seconds") ?? (quick ? 4 : 10));
/** Calls in flight in the rounds that compare the relay with its floor (over all the claims). */
const CONCURRENCY = Number(arg("--concurrency") ?? 64);
const ROUNDS = Number(arg("--rounds") ?? (quick ? 1 : 3));
/** The saturation phase: relayed claims calling a 1 s model while the claim loops run. */
const SLOW_CLAIMS = 64;
const LOAD_CLIENTS = 32;
const LOAD_EPISODES = 256;
/** The engine's ledger capture for the run; the engine's default otherwise. */
const CAPTURE = arg("--capture") === undefined ? undefined : CaptureMode.parse(arg("--capture"));
const log = (m: string): void => void process.stderr.write(`[bench:relay-scale] ${m}\n`);

/** Enough sockets for a thousand clients calling at once, kept alive. */
const dispatcher = new Agent({ connections: null, keepAliveTimeout: CLIENT_KEEP_ALIVE_MS, pipelining: 1 });
const BODY = JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "say something short" }] });

type Target = { url: string; key: string };

async function call(t: Target): Promise<void> {
  const res = await request(`${t.url}/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${t.key}`, "content-type": "application/json" }, body: BODY, dispatcher });
  const text = await res.body.text();
  if (res.statusCode !== 200 || !text.includes(" short")) throw new Error(`${t.url}: ${res.statusCode} ${text.slice(0, 200)}`);
}

/** CPU per call of the relay's workerd, its proxy, and this process (the load generator and the zero-latency model). */
type CallCpu = { workerd: number; proxy: number; load: number };
type Round = { calls: number; calls_per_s: number; latency_ms: Latency; errors: number; cpu_ms_per_call: CallCpu | null };

/**
 * `width` callers (all targets at once by default) call continuously for `seconds` in the
 * shared closed loop (no warm-up), caller k taking targets k, k + width, ... in turn: calls/s
 * and latencies of the calls started in the window, and the CPU per call of the relay's
 * workerd, its proxy (the agent's gateway, or the floor's) and this process (the callers and
 * the model) over the window: on a small machine all three share its cores.
 */
async function callLoop(label: string, targets: Target[], seconds: number, pids?: { workerd: number[]; proxy: number[] }, width = targets.length): Promise<Round> {
  const samples: number[] = [];
  const loop = closedLoop(
    { workers: Math.min(width, targets.length), warmupSec: 0, durationSec: seconds, label, unit: "calls", ...(pids ? { serverPids: pids.workerd, groupPids: { proxy: pids.proxy } } : {}), log },
    (k, w) => {
      let i = k;
      return async () => {
        const t = targets[i]!;
        i = (i + width) % targets.length;
        const s = performance.now();
        try {
          await call(t);
          if (!w.inWindow(s)) return;
          samples.push(performance.now() - s);
          w.counted++;
        } catch (e) {
          w.fault(`call to ${t.url} failed: ${e instanceof Error ? `${e.message} ${String((e as { cause?: unknown }).cause ?? "")}` : String(e)}`);
        }
      };
    },
  );
  const cpu = await loop.done;
  for (const e of loop.window.errorSamples.slice(0, 3)) log(e);
  const perCall = (use: CpuUse | undefined, pct = use?.server_cpu_pct ?? 0): number => Math.round(((pct * 10 * (use?.wall_s ?? 0)) / Math.max(1, samples.length)) * 1000) / 1000;
  return {
    calls: samples.length,
    calls_per_s: Math.round(samples.length / seconds),
    latency_ms: summarize(samples),
    errors: loop.window.errors,
    cpu_ms_per_call: pids ? { workerd: perCall(cpu), proxy: perCall(cpu.groups["proxy"]), load: perCall(cpu, cpu.loadgen_cpu_pct) } : null,
  };
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;

async function main(): Promise<void> {
  if (process.env["TMPDIR"] === undefined && existsSync("/dev/shm")) process.env["TMPDIR"] = "/dev/shm";
  const startedAt = new Date().toISOString();
  const dir = mkdtempSync(join(tmpdir(), "bench-relay-scale-"));
  const model = await startModelServer({ latencyMs: 0 });
  const slowModel = await startModelServer({ latencyMs: 1000 });
  const ex = await serveRelayedEngine({ name: "bench-relay-scale", claimKeySecret: "bench-relay-scale-secret", capture: CAPTURE, agentDir: dir, agentSettings: { ROLLOUT_HEARTBEAT_SECONDS: "5" } });
  const { engine, agent, capture } = ex;
  const exchangePids = ex.pids;
  const floor = await startRelayFloor({ upstream: model.url, log });
  const floorPids = { workerd: floor.pids, proxy: [floor.proxyPid] };
  try {
    const relayed: Target[] = await claimRelayed(engine, { prefix: "fast", n: CLAIMS, upstream: model.url });
    const floorTargets = relayed.map(() => ({ url: `${floor.url}/v1`, key: "sk-bench-trainer" }));
    log(`${CLAIMS} live claims, capture ${capture}; ${ROUNDS} rounds of ${SECONDS} s, relayed and floor in turns, ${CONCURRENCY} calls in flight; then all ${CLAIMS} at once`);
    // The relay's processes: workerd and the agent (its gateway); the floor's: its workerd and its proxy.
    const relayPids = { workerd: exchangePids, proxy: [agent.pid] };
    const engineRound = async (width: number) => {
      const before = await relayCounts(engine);
      const round = await callLoop(`relayed, ${width} in flight`, relayed, SECONDS, relayPids, width);
      const after = await relayCounts(engine);
      return { round, engine_requests: after.engine_requests - before.engine_requests, engine_calls: after.calls - before.calls };
    };

    // 1. Steady state: relayed against the floor, in turns, over all the claims. Every claim's first
    // call asks the engine about it (once per claim); the warm-up makes those before the rounds.
    await callLoop("relayed warm-up", relayed, 2, undefined, relayed.length);
    await callLoop("floor warm-up", floorTargets, 2, undefined, CONCURRENCY);
    const steady: { relayed: Round; floor: Round; engine_requests: number; engine_calls: number }[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      const rel = await engineRound(CONCURRENCY);
      const fl = await callLoop("floor", floorTargets, SECONDS, floorPids, CONCURRENCY);
      steady.push({ relayed: rel.round, floor: fl, engine_requests: rel.engine_requests, engine_calls: rel.engine_calls });
      log(`round ${r + 1}: relayed ${rel.round.calls_per_s} calls/s (p50 ${rel.round.latency_ms.p50} ms, CPU per call ${JSON.stringify(rel.round.cpu_ms_per_call)}), floor ${fl.calls_per_s} calls/s (${JSON.stringify(fl.cpu_ms_per_call)}); engine requests per call ${(rel.engine_requests / Math.max(1, rel.round.calls)).toFixed(4)}`);
    }
    // Every claim calling at once: the engine's requests per call when 1,000 callers queue.
    const fanIn = await engineRound(CLAIMS);
    log(`all ${CLAIMS} at once: relayed ${fanIn.round.calls_per_s} calls/s (p50 ${fanIn.round.latency_ms.p50} ms); engine requests per call ${(fanIn.engine_requests / Math.max(1, fanIn.round.calls)).toFixed(4)}`);
    const relayedPerS = median(steady.map((s) => s.relayed.calls_per_s));
    const floorPerS = median(steady.map((s) => s.floor.calls_per_s));
    const requests = steady.reduce((a, s) => a + s.engine_requests, 0);
    const callsMade = steady.reduce((a, s) => a + s.relayed.calls, 0);
    const engineCalls = steady.reduce((a, s) => a + s.engine_calls, 0);

    // 2. The engine saturated by claims and ends, alone and with relayed calls flowing.
    const slow: Target[] = await claimRelayed(engine, { prefix: "slow", n: SLOW_CLAIMS, upstream: slowModel.url });
    const saturated: { alone: number; with_relay: number; relayed_calls_per_s: number; relayed_p50_ms: number; relay_errors: number; workerd_ms_per_cycle_alone: number | null; workerd_ms_per_cycle_with_relay: number | null; loadgen_cpu_pct: { alone: number; with_relay: number }; other_cpu_pct: number }[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      const load = (label: string) => runLoad({ baseUrl: engine.baseUrl, clientToken: engine.clientToken, trainerToken: engine.trainerToken, clients: LOAD_CLIENTS, episodes: LOAD_EPISODES, durationSec: SECONDS, warmupSec: 2, setup: r === 0 && label === "alone", label, serverPids: exchangePids });
      // Alternately first and second, so that drift over the run (the engine's tables grow) favours neither.
      const aloneRound = async () => await load("alone");
      const withRound = async () => await Promise.all([load("with relay"), callLoop("relayed meanwhile", slow, SECONDS + 2)]);
      let alone: Awaited<ReturnType<typeof aloneRound>>;
      let withRelay: Awaited<ReturnType<typeof aloneRound>>;
      let flowing: Round;
      if (r % 2 === 0) {
        alone = await aloneRound();
        [withRelay, flowing] = await withRound();
      } else {
        [withRelay, flowing] = await withRound();
        alone = await aloneRound();
      }
      saturated.push({
        alone: alone.cycles_per_s,
        with_relay: withRelay.cycles_per_s,
        relayed_calls_per_s: flowing.calls_per_s,
        relayed_p50_ms: flowing.latency_ms.p50,
        relay_errors: flowing.errors,
        workerd_ms_per_cycle_alone: alone.server_cpu_ms_per_cycle,
        workerd_ms_per_cycle_with_relay: withRelay.server_cpu_ms_per_cycle,
        loadgen_cpu_pct: { alone: alone.loadgen_cpu_pct, with_relay: withRelay.loadgen_cpu_pct },
        other_cpu_pct: alone.other_cpu_pct,
      });
      log(`saturated round ${r + 1}: ${alone.cycles_per_s} cycles/s alone, ${withRelay.cycles_per_s} with ${flowing.calls_per_s} relayed calls/s (p50 ${flowing.latency_ms.p50} ms); workerd ms per cycle ${alone.server_cpu_ms_per_cycle} / ${withRelay.server_cpu_ms_per_cycle}, load generator ${alone.loadgen_cpu_pct}% / ${withRelay.loadgen_cpu_pct}% of a core`);
    }
    const alone = median(saturated.map((s) => s.alone));
    const withRelay = median(saturated.map((s) => s.with_relay));

    const doc = {
      started_at: startedAt,
      cpus: cpus().length,
      load_average_1m: loadavg()[0],
      node: process.version,
      claims: CLAIMS,
      capture,
      seconds_per_round: SECONDS,
      rounds: ROUNDS,
      steady: {
        relayed_calls_per_s: relayedPerS,
        floor_calls_per_s: floorPerS,
        relayed_over_floor: Math.round((relayedPerS / floorPerS) * 1000) / 1000,
        /** CPU per call of the relay's processes (workerd, the agent) and the floor's (its workerd, its proxy). */
        cpu_ms_per_call: {
          relayed: {
            workerd: median(steady.map((s) => s.relayed.cpu_ms_per_call?.workerd ?? 0)),
            gateway: median(steady.map((s) => s.relayed.cpu_ms_per_call?.proxy ?? 0)),
            load: median(steady.map((s) => s.relayed.cpu_ms_per_call?.load ?? 0)),
          },
          floor: {
            workerd: median(steady.map((s) => s.floor.cpu_ms_per_call?.workerd ?? 0)),
            proxy: median(steady.map((s) => s.floor.cpu_ms_per_call?.proxy ?? 0)),
            load: median(steady.map((s) => s.floor.cpu_ms_per_call?.load ?? 0)),
          },
        },
        engine_requests_per_call: Math.round((requests / Math.max(1, callsMade)) * 10000) / 10000,
        calls_made: callsMade,
        calls_the_engine_counted: engineCalls,
        concurrency: CONCURRENCY,
        rounds: steady,
      },
      all_at_once: {
        relayed_calls_per_s: fanIn.round.calls_per_s,
        latency_ms: fanIn.round.latency_ms,
        errors: fanIn.round.errors,
        engine_requests_per_call: Math.round((fanIn.engine_requests / Math.max(1, fanIn.round.calls)) * 10000) / 10000,
      },
      saturated: {
        load: `${LOAD_CLIENTS} clients x ${LOAD_EPISODES} episodes (claim -> end -> register)`,
        relayed_claims: SLOW_CLAIMS,
        model_latency_ms: 1000,
        cycles_per_s_alone: alone,
        cycles_per_s_with_relay: withRelay,
        with_over_alone: Math.round((withRelay / alone) * 1000) / 1000,
        rounds: saturated,
      },
    };
    const json = JSON.stringify(doc, null, 2);
    process.stdout.write(json + "\n");
    const out = arg("--out");
    if (out) {
      writeFileSync(out, json + "\n");
      writeFileSync(out.replace(/\.json$/, "") + ".svg", renderScaleChart(doc));
      log(`wrote ${out} and its chart`);
    }
  } finally {
    await floor.stop();
    await ex.stop();
    await model.close();
    await slowModel.close();
    await dispatcher.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`bench:relay-scale failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
