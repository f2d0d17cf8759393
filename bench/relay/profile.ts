/**
 * npm run bench:relay-profile [-- --seconds S] [-- --claims N] [-- --concurrency C] [-- --capture MODE] [-- --top K] [-- --out DIR] [-- --cpu W]
 *
 * Where a relayed call's CPU goes: N live claims call a zero-latency model through the exchange
 * (Worker, engine, the agent's gateway) with C calls in flight, while workerd's V8 inspector and
 * the agent's `--cpu-prof` profile them. Prints, per process, the functions with the most self
 * time (and the share of it that is idle or garbage collection), and writes both profiles
 * (.cpuprofile, for Chrome DevTools or speedscope) to DIR (a temporary directory by default).
 *
 * `--floor`: the same of the relay's floor (./floor: a bare Worker and a bare proxy), its workerd
 * profiled, to read the relay's profile against.
 *
 * `--cpu W`: no profilers; W windows of S seconds each report the CPU per call of workerd and
 * of the agent (from /proc), then their medians: the quick way to compare two versions of the
 * relay's code, which the profilers' own cost would blur.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent, request } from "undici";
import { startModelServer } from "../../scripts/local/model-server";
import { LedgerClient } from "../../src/client";
import { CaptureMode } from "../../src/protocol/ledger";
import { agentEnv, serveAgent, type AgentTarget } from "../serve/agent";
import { createEngine, serveExchange } from "../serve/exchange";
import { freePort } from "../serve/process";
import { cpuMeter } from "../stats";
import { startRelayFloor } from "./floor/serve";

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const SECONDS = Number(arg("--seconds") ?? 8);
const CLAIMS = Number(arg("--claims") ?? 200);
const CONCURRENCY = Number(arg("--concurrency") ?? 64);
const TOP = Number(arg("--top") ?? 25);
const FLOOR = process.argv.includes("--floor");
const CPU_WINDOWS = arg("--cpu") === undefined ? 0 : Number(arg("--cpu"));
const CAPTURE = arg("--capture") === undefined ? undefined : CaptureMode.parse(arg("--capture"));
const log = (m: string): void => void process.stderr.write(`[bench:relay-profile] ${m}\n`);
const dispatcher = new Agent({ connections: null, keepAliveTimeout: 60_000 });
const BODY = JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "say something short" }] });

type ProfileNode = { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] };
type Profile = { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[] };

/** Self time per function (name, file and line), largest first, as shares of the profile's samples. */
function selfTimes(p: Profile, top: number): string[] {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const ms = new Map<string, number>();
  let total = 0;
  p.samples.forEach((id, i) => {
    const f = byId.get(id)!.callFrame;
    const file = f.url.split("/").slice(-2).join("/");
    const k = `${f.functionName || "(anonymous)"} ${file}${file ? `:${f.lineNumber + 1}` : ""}`;
    const dt = (p.timeDeltas[i] ?? 0) / 1000;
    ms.set(k, (ms.get(k) ?? 0) + dt);
    total += dt;
  });
  const busy = total - (ms.get("(idle) ") ?? 0);
  return [
    `${total.toFixed(0)} ms profiled, ${busy.toFixed(0)} ms busy`,
    ...[...ms.entries()]
      .filter(([k]) => k !== "(idle) ")
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([k, v]) => `${((v / Math.max(1, busy)) * 100).toFixed(1).padStart(5)}%  ${v.toFixed(0).padStart(6)} ms  ${k}`),
  ];
}

/** A Chrome DevTools protocol session over the inspector's WebSocket. */
async function devtools(port: number): Promise<{ send(method: string, params?: object): Promise<unknown>; close(): void }> {
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json`)).json()) as { webSocketDebuggerUrl: string; title?: string }[];
  const target = targets.find((t) => !/miniflare|entry/i.test(t.title ?? "")) ?? targets[0];
  if (target === undefined) throw new Error("workerd's inspector lists no worker");
  const ws = new WebSocket(target.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  let next = 1;
  const waiting = new Map<number, (v: unknown) => void>();
  ws.onmessage = (ev) => {
    const m = JSON.parse(String(ev.data)) as { id?: number; result?: unknown };
    if (m.id !== undefined) waiting.get(m.id)?.(m.result);
  };
  return {
    send: (method, params = {}) =>
      new Promise((resolve) => {
        const id = next++;
        waiting.set(id, resolve);
        ws.send(JSON.stringify({ id, method, params }));
      }),
    close: () => ws.close(),
  };
}

async function main(): Promise<void> {
  const out = arg("--out") ?? mkdtempSync(join(tmpdir(), "relay-profile-"));
  mkdirSync(out, { recursive: true });
  const model = await startModelServer({ latencyMs: 0 });
  const inspectorPort = await freePort();
  const floor = FLOOR ? await startRelayFloor({ upstream: model.url, inspectorPort }) : null;
  const ex = FLOOR ? null : await serveExchange({ prefix: "bench-relay-profile", inspectorPort });
  let agent: AgentTarget | null = null;
  try {
    let url: string;
    const keys: string[] = [];
    /** The processes whose CPU per call is reported: workerd's, and the proxy's (the agent or the floor's). */
    let pids: { workerd: number[]; proxy: number };
    if (ex === null) {
      url = `${floor!.url}/v1/chat/completions`;
      keys.push("sk-bench");
      pids = { workerd: floor!.pids, proxy: floor!.proxyPid };
    } else {
      const engine = await createEngine(ex.url, ex.adminToken, "bench-relay-profile");
      const trainer = engine.as("trainer");
      const client = engine.as("client");
      if (CAPTURE !== undefined) await new LedgerClient({ baseUrl: engine.baseUrl, token: engine.operatorToken }).configure({ capture: CAPTURE });
      agent = await serveAgent(agentEnv({ server: ex.url, engine: engine.name, trainerToken: engine.trainerToken, dir: out }, CPU_WINDOWS > 0 ? {} : { NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${out}` }));
      while ((await client.overview()).agent.gateway_url !== agent.gateway) await new Promise((r) => setTimeout(r, 100));
      await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
      await trainer.batchRegisterEpisodes({ episodes: Array.from({ length: CLAIMS }, (_, i) => ({ episode_uuid: `p-${i}`, openai_base_url: `${model.url}/v1`, openai_api_key: "sk-bench", zmq_listen_result_addr: "" })) });
      for (let i = 0; i < CLAIMS; i++) {
        const c = await client.claimEpisode({ client_uuid: `p-c-${i}`, discard_episode_timeout: 3600 });
        if (!c.success) throw new Error(c.fail_cause);
        keys.push(c.openai_api_key);
      }
      url = `${ex.url}/e/${engine.name}/v1/chat/completions`;
      pids = { workerd: ex.pids, proxy: agent.pid };
    }
    let calls = 0;
    const load = async (seconds: number): Promise<void> => {
      const until = Date.now() + seconds * 1000;
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async (_, w) => {
          for (let i = w; Date.now() < until; i += CONCURRENCY) {
            const res = await request(url, { method: "POST", headers: { authorization: `Bearer ${keys[i % keys.length]}`, "content-type": "application/json" }, body: BODY, dispatcher });
            await res.body.text();
            if (res.statusCode !== 200) throw new Error(`relayed call: ${res.statusCode}`);
            calls++;
          }
        }),
      );
    };
    await load(2);
    if (CPU_WINDOWS > 0) {
      const rows: { calls_per_s: number; workerd: number; proxy: number }[] = [];
      for (let w = 0; w < CPU_WINDOWS; w++) {
        const meter = cpuMeter(pids.workerd);
        const agentMeter = cpuMeter([pids.proxy]);
        calls = 0;
        meter.start();
        agentMeter.start();
        await load(SECONDS);
        const cpu = meter.stop();
        const a = agentMeter.stop();
        const perCall = (pct: number | null): number => Math.round((((pct ?? 0) * 10 * cpu.wall_s) / calls) * 1000) / 1000;
        rows.push({ calls_per_s: Math.round(calls / cpu.wall_s), workerd: perCall(cpu.server_cpu_pct), proxy: perCall(a.server_cpu_pct) });
        log(`window ${w + 1}: ${JSON.stringify(rows.at(-1))}`);
      }
      const med = (xs: number[]): number => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)] ?? 0;
      process.stdout.write(JSON.stringify({ calls_per_s: med(rows.map((r) => r.calls_per_s)), cpu_ms_per_call: { workerd: med(rows.map((r) => r.workerd)), proxy: med(rows.map((r) => r.proxy)) } }) + "\n");
      return;
    }
    const dt = await devtools(inspectorPort);
    await dt.send("Profiler.enable");
    await dt.send("Profiler.setSamplingInterval", { interval: 200 });
    await dt.send("Profiler.start");
    calls = 0;
    log(`profiling ${SECONDS} s of relayed calls, ${CONCURRENCY} in flight over ${CLAIMS} claims`);
    await load(SECONDS);
    const { profile } = (await dt.send("Profiler.stop")) as { profile: Profile };
    dt.close();
    log(`${calls} calls (${Math.round(calls / SECONDS)}/s)`);
    writeFileSync(join(out, "workerd.cpuprofile"), JSON.stringify(profile));
    process.stdout.write([floor ? "workerd (the floor's bare Worker):" : "workerd (the Worker and the engine):", ...selfTimes(profile, TOP), ""].join("\n") + "\n");
    if (agent === null) return;
    await agent.stop();
    agent = null;
    const agentProfile = readdirSync(out).find((f) => f.endsWith(".cpuprofile") && f.startsWith("CPU."));
    if (agentProfile === undefined) throw new Error(`the agent wrote no profile to ${out}`);
    const p = JSON.parse(readFileSync(join(out, agentProfile), "utf8")) as Profile;
    process.stdout.write(["the agent (its gateway; the whole run, set-up included):", ...selfTimes(p, TOP), ""].join("\n") + "\n");
    log(`profiles in ${out}`);
  } finally {
    await agent?.stop().catch(() => agent?.kill());
    await floor?.stop();
    await ex?.stop();
    await model.close();
    await dispatcher.close();
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`bench:relay-profile failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
