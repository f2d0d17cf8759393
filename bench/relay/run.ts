/**
 * npm run bench:relay [-- --quick] [-- --calls N] [-- --latency MS] [-- --out FILE]
 *
 * The LLM relay's overhead per call: 64 clients, each with its own claim and per-claim key,
 * call a local OpenAI-compatible model server with a fixed latency, streaming, (a) directly
 * and (b) through the exchange: the Worker on Miniflare checks the key, admits the call in the
 * engine's Durable Object and relays it signed to the agent's gateway (the agent's CLI, its
 * own process), which forwards it to the same model server. Rounds alternate direct and
 * relayed so both see the same machine. A call's time runs from the request to the end of
 * the stream; time to the first content byte is kept too. The same for non-streamed calls.
 * Alongside, the relay's floor (./floor): a bare Worker and a bare Node proxy in the same two
 * hops, so the exchange's overhead can be read against what any such relay costs here.
 * --history-kb N puts N KB of earlier turns in front of every call (agentic rollouts carry long
 * contexts; what the relay does per byte shows only then).
 * --drip N adds, one call at a time, a streamed answer of N tokens sent 1 ms apart, each its own
 * chunk, direct and relayed: what the relay costs per token (the default model writes its whole
 * stream at once). --drip-streams also makes the 64 concurrent streams such answers, with
 * tokens --drip-ms apart (default 20 ms: 50 tokens/s per stream, a model's pace).
 * --capture off|messages|tokens sets the engine's trajectory ledger capture for the run (the
 * engine's default otherwise). --capture-compare off,tokens instead times only the 64 streams,
 * direct and relayed, in rounds that take turns between the two capture modes, and reads the
 * ledger back (./capture.ts). With `tokens` the model server answers vLLM's token ids and
 * logprobs, which the agent's gateway asks for and records.
 * --against DIR adds, in the same rounds, the exchange and agent of another checkout (a git
 * worktree) as a target of their own: the relay as it was, against the relay as it is, on the
 * same machine in the same minutes.
 * Prints one JSON document (and writes it to --out, with a chart of the overheads next to it
 * as FILE.svg; not with --capture-compare). --render FILE.json only draws the chart of an
 * earlier run's JSON.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startModelServer } from "../../scripts/local/model-server";
import { LedgerClient } from "../../src/client";
import { CaptureMode } from "../../src/protocol/ledger";
import { cpuMeter, summarize, type Latency } from "../stats";
import { signEnvelope } from "../../src/auth/gateway-signature";
import { GATEWAY_RELAY_PATH, SIGNATURE_HEADER, TIMESTAMP_HEADER, type RelayEnvelope } from "../../src/protocol/relay";
import { claimRelayed, relayCounts, serveRelayedEngine, type RelayedEngine } from "../serve/relayed-engine";
import { startRelayFloor, type RelayFloor } from "./floor/serve";
import { renderRelayChart, type RelayChartInput } from "./chart";
import { compareCapture } from "./capture";

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const quick = process.argv.includes("--quick");
const CLIENTS = Number(arg("--clients") ?? 64);
const CALLS = Number(arg("--calls") ?? (quick ? 3 : 10)); // per client and round
const ROUNDS = Number(arg("--rounds") ?? (quick ? 1 : 3));
/** A model call of about a second: the offered load (64/s) stays below what the relay can carry here, so the figures are overhead, not queueing. */
const LATENCY_MS = Number(arg("--latency") ?? 1000);
const SINGLE_CALLS = quick ? 10 : 40;
const HISTORY_KB = Number(arg("--history-kb") ?? 0);
/** Tokens in a streamed answer sent one by one, 1 ms apart (the model server's "drip"); 0 skips that measurement. */
const DRIP = Number(arg("--drip") ?? 0);
/** With --drip N, the concurrent rounds' streamed calls get drip answers too (--drip-streams), tokens --drip-ms apart (20). */
const DRIP_STREAMS = DRIP > 0 && process.argv.includes("--drip-streams");
const DRIP_MS = Number(arg("--drip-ms") ?? 20);
/** The engine's capture for the whole run; undefined leaves the engine's default. */
const CAPTURE = arg("--capture") === undefined ? undefined : CaptureMode.parse(arg("--capture"));
/** Two capture modes to take turns in the same run (only the 64 streams are timed then). */
const COMPARE = arg("--capture-compare")?.split(",").map((m) => CaptureMode.parse(m.trim()));
if (COMPARE !== undefined && COMPARE.length !== 2) throw new Error("--capture-compare takes two modes, e.g. off,tokens");
if (COMPARE !== undefined && arg("--against") !== undefined) throw new Error("--against times the relay of two checkouts; --capture-compare two capture modes of one: use one of them");
/** Earlier turns of a conversation, about HISTORY_KB KB of JSON, the same for every call. */
const HISTORY: { role: string; content: string }[] = [];
for (let size = 0; size < HISTORY_KB * 1000; ) {
  const m = { role: HISTORY.length % 2 ? "assistant" : "user", content: `turn ${HISTORY.length}: ${"the agent reads the observation and calls a tool. ".repeat(8)}` };
  HISTORY.push(m);
  size += JSON.stringify(m).length + 1;
}
/** Another checkout whose exchange is timed beside this one's (--against DIR). */
const AGAINST = arg("--against") === undefined ? undefined : resolve(arg("--against")!);
let gatewayBase = "";
const log = (m: string): void => void process.stderr.write(`[bench:relay] ${m}\n`);

/** An OpenAI-compatible endpoint, or the agent's gateway itself (signed envelopes, no Worker). */
type Target = { url: string; key: string; gateway?: { secret: string; episode: string } };
type Sample = { total: number; first: number };

/** One call, timed to the first content and to the end of the answer. */
async function call(t: Target, stream: boolean, i: number, model = "tiny"): Promise<Sample> {
  const t0 = performance.now();
  const request = { model, stream, messages: [...HISTORY, { role: "user", content: `call ${i}: say something short` }] };
  let res: Response;
  if (t.gateway) {
    // What the Worker sends: the signing is part of the measured time, as it is in the Worker.
    const env: RelayEnvelope = { endpoint: "/v1/chat/completions", engine: "bench-relay", episode_uuid: t.gateway.episode, fence: 1, trainer_api_key: t.key, trainer_base_url: t.url, deadline_seconds: 600, request };
    const body = JSON.stringify(env);
    const ts = Math.floor(Date.now() / 1000);
    const sig = await signEnvelope(t.gateway.secret, ts, body);
    res = await fetch(gatewayBase + GATEWAY_RELAY_PATH, { method: "POST", headers: { "content-type": "application/json", [TIMESTAMP_HEADER]: String(ts), [SIGNATURE_HEADER]: sig }, body });
  } else {
    res = await fetch(`${t.url}/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${t.key}`, "content-type": "application/json" }, body: JSON.stringify(request) });
  }
  if (res.status !== 200 || res.body === null) throw new Error(`${t.url}: ${res.status} ${await res.text()}`);
  let first = 0;
  let text = "";
  const dec = new TextDecoder();
  const reader = res.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (first === 0) first = performance.now() - t0;
    text += dec.decode(value, { stream: true });
  }
  const total = performance.now() - t0;
  const complete = model === "drip" ? text.includes(`" t${DRIP - 1}"`) : text.includes(" short");
  if (!complete || (stream && !text.includes("[DONE]"))) throw new Error(`unexpected answer: ${text.slice(0, 200)}`);
  // With capture tokens the gateway asks the model for token ids; the client, who did not, must not get them.
  if (text.includes('"token_ids"')) throw new Error(`the answer carries token ids the client did not ask for: ${text.slice(0, 200)}`);
  return { total, first };
}

/** Every client makes `calls` calls one after another; all clients at once. */
async function round(targets: Target[], stream: boolean, calls: number): Promise<Sample[]> {
  const out: Sample[] = [];
  await Promise.all(
    targets.map(async (t, k) => {
      // Spread the clients' starts over one model latency: rollouts are not in lockstep, and 64
      // calls arriving in the same millisecond would measure a burst's queue, not the relay.
      await new Promise((r) => setTimeout(r, (k * LATENCY_MS) / targets.length));
      for (let i = 0; i < calls; i++) out.push(await call(t, stream, i, stream && DRIP_STREAMS ? "drip" : "tiny"));
    }),
  );
  return out;
}

const diff = (a: Latency, b: Latency) => ({ p50: Math.round((a.p50 - b.p50) * 100) / 100, p99: Math.round((a.p99 - b.p99) * 100) / 100, mean: Math.round((a.mean - b.mean) * 100) / 100 });

type ChartDoc = Omit<RelayChartInput, "stream" | "whole" | "one_at_a_time"> & { results: Pick<RelayChartInput, "stream" | "whole" | "one_at_a_time"> };

/** FILE.svg next to FILE.json. */
function writeChart(jsonPath: string, doc: ChartDoc): void {
  const svg = jsonPath.replace(/\.json$/, "") + ".svg";
  writeFileSync(svg, renderRelayChart({ ...doc, ...doc.results }));
  log(`chart: ${svg}`);
}

async function main(): Promise<void> {
  const render = arg("--render");
  if (render) return writeChart(render, JSON.parse(readFileSync(render, "utf8")) as ChartDoc);
  const startedAt = new Date().toISOString();
  // Miniflare keeps unpersisted state under os.tmpdir() and fsyncs every commit; on tmpfs that
  // is memory, as in production Durable Objects (see the engine benchmark).
  if (process.env["TMPDIR"] === undefined && existsSync("/dev/shm")) process.env["TMPDIR"] = "/dev/shm";
  const dir = mkdtempSync(join(tmpdir(), "bench-relay-"));
  const model = await startModelServer({ latencyMs: LATENCY_MS, dripTokens: DRIP, dripMs: DRIP_MS });
  // Named as the gateway-only calls' envelopes name it.
  const ex = await serveRelayedEngine({ name: "bench-relay", claimKeySecret: "bench-relay-claim-secret", capture: CAPTURE, agentDir: dir, agentSettings: { ROLLOUT_HEARTBEAT_SECONDS: "1" } });
  const { pids, engine, agent, capture } = ex;
  let floor: RelayFloor | null = null;
  let fastFloor: RelayFloor | null = null;
  let against: RelayedEngine | null = null;
  try {
    const trainer = engine.as("trainer");
    const client = engine.as("client");
    const ledger = new LedgerClient({ baseUrl: engine.baseUrl, token: engine.operatorToken });
    gatewayBase = agent.gateway;
    const secret = (await trainer.gatewaySecret()).secret;
    floor = COMPARE ? null : await startRelayFloor({ upstream: model.url, log });
    // --against: another checkout's exchange and agent, with claims of their own on the same model.
    let relayedThen: Target[] = [];
    if (AGAINST !== undefined) {
      against = await serveRelayedEngine({ name: "bench-relay-against", claimKeySecret: "bench-relay-against-secret", checkout: AGAINST, capture: CAPTURE, agentDir: join(dir, "against"), agentSettings: { ROLLOUT_HEARTBEAT_SECONDS: "1" } });
      relayedThen = await claimRelayed(against.engine, { prefix: "ep", n: CLIENTS, upstream: model.url });
      log(`against ${AGAINST}: its exchange and agent, ${CLIENTS} claims, capture ${against.capture}`);
    }
    const claims = await claimRelayed(engine, { prefix: "ep", n: CLIENTS, upstream: model.url });
    const relayed: Target[] = claims.map((c) => ({ url: c.url, key: c.key }));
    const direct: Target[] = claims.map(() => ({ url: `${model.url}/v1`, key: "sk-bench-trainer" }));
    const gatewayOnly: Target[] = claims.map((c) => ({ url: `${model.url}/v1`, key: "sk-bench-trainer", gateway: { secret, episode: c.episode } }));
    const bare = floor;
    const floorBoth: Target[] = bare ? claims.map(() => ({ url: `${bare.url}/v1`, key: "sk-bench-trainer" })) : [];
    const floorProxy: Target[] = bare ? claims.map(() => ({ url: `${bare.proxyUrl}/v1`, key: "sk-bench-trainer" })) : [];
    log(`${CLIENTS} claims; model latency ${LATENCY_MS} ms; ${ROUNDS} rounds of ${CALLS} calls per client and target; capture ${COMPARE?.join(" and ") ?? capture}`);
    if (COMPARE) {
      const loadBefore = loadavg();
      const compared = await compareCapture({
        modes: COMPARE,
        direct,
        relayed,
        episodes: claims.map((c) => c.episode),
        rounds: ROUNDS,
        calls: CALLS,
        round: async (ts, calls) => (await round(ts, true, calls)).map((s) => s.total),
        ledger,
        pids: { workerd: pids, agent: [agent.pid] },
        log,
      });
      const doc = { started_at: startedAt, clients: CLIENTS, load_average_before: loadBefore, load_average_after: loadavg(), cpus: cpus().length, calls_per_round: CALLS, model_latency_ms: LATENCY_MS, history_kb: HISTORY_KB, node: process.version, capture: compared };
      const json = JSON.stringify(doc, null, 2);
      process.stdout.write(json + "\n");
      const out = arg("--out");
      if (out) writeFileSync(out, json + "\n");
      return;
    }
    if (floor === null) throw new Error("unreachable: the floor runs unless --capture-compare");

    const results: Record<string, unknown> = {};
    for (const stream of [true, false]) {
      await round(direct, stream, 3); // warm-up: connections, JIT, the Durable Object
      await round(relayed, stream, 3);
      await round(relayedThen, stream, 3);
      await round(gatewayOnly, stream, 3);
      await round(floorBoth, stream, 3);
      await round(floorProxy, stream, 3);
      const d: Sample[] = [];
      const r: Sample[] = [];
      const g: Sample[] = [];
      const f: Sample[] = [];
      const fp: Sample[] = [];
      const a: Sample[] = [];
      for (let k = 0; k < ROUNDS; k++) {
        const t0 = performance.now();
        d.push(...(await round(direct, stream, CALLS)));
        const t1 = performance.now();
        // The two relays take turns going first (--against): the round after a relay's sees its aftermath.
        const relays: [Sample[], Target[]][] = k % 2 === 0 ? [[r, relayed], [a, relayedThen]] : [[a, relayedThen], [r, relayed]];
        for (const [into, targets] of relays) into.push(...(await round(targets, stream, CALLS)));
        const t2 = performance.now();
        g.push(...(await round(gatewayOnly, stream, CALLS)));
        const t3 = performance.now();
        f.push(...(await round(floorBoth, stream, CALLS)));
        const t4 = performance.now();
        fp.push(...(await round(floorProxy, stream, CALLS)));
        const ms = (a: number, b: number) => (b - a).toFixed(0);
        log(
          `${stream ? "stream" : "whole "} round ${k + 1}: direct ${ms(t0, t1)} ms, relayed${a.length > 0 ? " (both)" : ""} ${ms(t1, t2)} ms, gateway only ${ms(t2, t3)} ms, ` +
            `floor ${ms(t3, t4)} ms, floor proxy only ${ms(t4, performance.now())} ms`,
        );
      }
      const [dt, rt, gt, ft, fpt] = [d, r, g, f, fp].map((x) => summarize(x.map((s) => s.total))) as [Latency, Latency, Latency, Latency, Latency];
      const [df, rf] = [d, r].map((x) => summarize(x.map((s) => s.first))) as [Latency, Latency];
      const at = summarize(a.map((s) => s.total));
      results[stream ? "stream" : "whole"] = {
        direct: dt,
        relayed: rt,
        gateway_only: gt,
        overhead: diff(rt, dt),
        overhead_of_gateway: diff(gt, dt),
        floor: ft,
        floor_proxy_only: fpt,
        overhead_of_floor: diff(ft, dt),
        overhead_of_floor_proxy: diff(fpt, dt),
        // What the exchange adds beyond the floor's two bare hops.
        overhead_beyond_floor: diff(rt, ft),
        first_byte: { direct: df, relayed: rf, overhead: diff(rf, df) },
        // The other checkout's relay (--against), and what it added to a direct call in the same rounds.
        ...(a.length > 0 ? { against: { checkout: AGAINST, relayed: at, overhead: diff(at, dt) } } : {}),
      };
      log(
        `${stream ? "stream" : "whole "}: direct p50 ${dt.p50} p99 ${dt.p99}; relayed p50 ${rt.p50} p99 ${rt.p99}; ${a.length > 0 ? `against p50 ${at.p50} p99 ${at.p99}; ` : ""}gateway only p50 ${gt.p50} p99 ${gt.p99}; ` +
          `floor p50 ${ft.p50} p99 ${ft.p99}; floor proxy only p50 ${fpt.p50} p99 ${fpt.p99} (ms)`,
      );
    }
    // One call at a time, to split the per-call overhead without queueing: the gateway's share
    // (gateway only vs direct), the Worker's (relayed vs gateway only), and of that the
    // admission alone: a key whose claim is over is refused by the engine after the key check
    // and the Durable Object's read, before anything is relayed.
    // A model of 20 ms here, so a few hundred calls take seconds.
    const fast = await startModelServer({ latencyMs: 20, dripTokens: DRIP });
    await trainer.registerEpisode({ episode_uuid: "ep-single", openai_base_url: `${fast.url}/v1`, openai_api_key: "sk-bench-trainer", zmq_listen_result_addr: "" });
    const sc = await client.claimEpisode({ client_uuid: "c-single", discard_episode_timeout: 3600 });
    const singleTargets: Record<string, Target> = {
      direct: { url: `${fast.url}/v1`, key: "sk-bench-trainer" },
      relayed: { url: sc.openai_base_url, key: sc.openai_api_key },
      gateway_only: { url: `${fast.url}/v1`, key: "sk-bench-trainer", gateway: { secret, episode: "ep-single" } },
    };
    fastFloor = await startRelayFloor({ upstream: fast.url, log });
    const fastFloorPids = fastFloor.pids;
    singleTargets["floor"] = { url: `${fastFloor.url}/v1`, key: "sk-bench-trainer" };
    singleTargets["floor_proxy_only"] = { url: `${fastFloor.proxyUrl}/v1`, key: "sk-bench-trainer" };
    await trainer.registerEpisode({ episode_uuid: "ep-dead", openai_base_url: `${model.url}/v1`, openai_api_key: "sk-bench-trainer", zmq_listen_result_addr: "" });
    const dead = await client.claimEpisode({ client_uuid: "c-dead", discard_episode_timeout: 3600 });
    await client.abortEpisode({ client_uuid: "c-dead", episode_uuid: dead.episode_uuid });
    const samples = new Map<string, number[]>();
    const workerdCpu: Record<string, number[]> = {};
    const one = async (name: string, fn: () => Promise<unknown>): Promise<void> => {
      const xs = samples.get(name) ?? [];
      samples.set(name, xs);
      // Each target's CPU is its own server's: the floor has a workerd of its own.
      const meter = cpuMeter(name === "floor" ? fastFloorPids : pids);
      for (let i = 0; i < SINGLE_CALLS + 5; i++) {
        if (i === 5) meter.start();
        const t0 = performance.now();
        await fn();
        if (i >= 5) xs.push(performance.now() - t0);
      }
      // workerd's CPU per call (the Worker, the engine, Miniflare's isolates): what a call costs the exchange.
      const cpu = meter.stop();
      if (cpu.server_cpu_pct !== null) (workerdCpu[name] ??= []).push((cpu.server_cpu_pct * 10 * cpu.wall_s) / SINGLE_CALLS);
    };
    for (let k = 0; k < 2; k++) {
      for (const [name, t] of Object.entries(singleTargets)) await one(name, () => call(t, true, 0));
      if (DRIP > 0) {
        // A streamed answer of DRIP tokens, each its own chunk: what relaying a token costs.
        await one(`direct_drip_${DRIP}`, () => call(singleTargets["direct"]!, true, 0, "drip"));
        await one(`relayed_drip_${DRIP}`, () => call(singleTargets["relayed"]!, true, 0, "drip"));
      }
      await one("admission_refused", async () => {
        const res = await fetch(`${dead.openai_base_url}/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${dead.openai_api_key}` }, body: '{"model":"tiny"}' });
        if (res.status !== 401) throw new Error(`expected 401, got ${res.status}`);
        await res.text();
      });
    }
    const single = Object.fromEntries([...samples].map(([k, xs]) => [k, summarize(xs)]));
    log(`one at a time (p50 ms): ${Object.entries(single).map(([k, v]) => `${k} ${v.p50}`).join(", ")}`);
    const cpuPerCall = Object.fromEntries(Object.entries(workerdCpu).map(([k, xs]) => [k, Math.round((xs.reduce((a, b) => a + b, 0) / xs.length) * 100) / 100]));
    log(`one at a time, workerd CPU per call (ms): ${Object.entries(cpuPerCall).map(([k, v]) => `${k} ${v}`).join(", ")}`);
    results["one_at_a_time"] = { model_latency_ms: 20, calls: SINGLE_CALLS * 2, ...single, workerd_cpu_ms_per_call: cpuPerCall };
    await fast.close();
    const counted = (await client.runningEpisodes({ limit: 100 })).episodes.reduce((a, e) => a + e.llm_call_count, 0);
    // The engine's own count of the calls and of the requests its relay took: how many calls the claim gate answered without it.
    const relay = await relayCounts(engine);
    const doc = { started_at: startedAt, capture, clients: CLIENTS, load_average_1m: loadavg()[0], cpus: cpus().length, calls_per_round: CALLS, rounds: ROUNDS, model_latency_ms: LATENCY_MS, history_kb: HISTORY_KB, node: process.version, results, llm_calls_counted: counted, engine_relay: relay };
    const json = JSON.stringify(doc, null, 2);
    process.stdout.write(json + "\n");
    const out = arg("--out");
    if (out) {
      writeFileSync(out, json + "\n");
      writeChart(out, doc as unknown as ChartDoc);
    }
  } finally {
    await fastFloor?.stop();
    await against?.stop();
    await floor?.stop();
    await ex.stop();
    await model.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`bench:relay failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
