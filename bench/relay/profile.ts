/**
 * npm run bench:relay-profile [-- --seconds S] [-- --claims N] [-- --concurrency C] [-- --capture MODE] [-- --top K] [-- --out DIR] [-- --cpu W [--against DIR [--fresh K]]]
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
 *
 * `--cpu W --against DIR`: the same for this tree and another checkout (a git worktree with a
 * change, say), both served at once and measured in turns, window by window: the machine's
 * speed swings by a fifth within minutes, more than most changes are worth, and alternating
 * puts the swings on both; `--fresh K` (4) starts both afresh every K windows. Reports each
 * side's medians and the paired difference per call.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Agent, request } from "undici";
import { startModelServer } from "../../scripts/local/model-server";
import { CaptureMode } from "../../src/protocol/ledger";
import type { AgentTarget } from "../serve/agent";
import { claimRelayed, relayCounts, serveRelayedEngine } from "../serve/relayed-engine";
import { CLIENT_KEEP_ALIVE_MS } from "../load/http";
import { freePort } from "../serve/process";
import { cpuMeter, paired } from "../stats";
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
/** With --against: new processes for both sides every this many windows. */
const FRESH = Math.max(1, Number(arg("--fresh") ?? 4));
const CAPTURE = arg("--capture") === undefined ? undefined : CaptureMode.parse(arg("--capture"));
const log = (m: string): void => void process.stderr.write(`[bench:relay-profile] ${m}\n`);
const dispatcher = new Agent({ connections: null, keepAliveTimeout: CLIENT_KEEP_ALIVE_MS });
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

/** One relay under load: its call URL and keys, the processes whose CPU is read, how to stop it. */
type Side = {
  name: string;
  url: string;
  keys: string[];
  pids: { workerd: number[]; proxy: number };
  agent: AgentTarget | null;
  /** The engine's own count of relayed calls and of the requests its relay took (overview.relay); none for the floor. */
  relay(): Promise<{ calls: number; engine_requests: number } | null>;
  stop(): Promise<void>;
};

/** The exchange of `checkout` (this tree by default) with an engine, its agent and CLAIMS claims of the zero-latency model. */
async function startExchangeSide(name: string, modelUrl: string, out: string, inspectorPort: number | undefined, checkout?: string): Promise<Side> {
  const ex = await serveRelayedEngine({
    name: "bench-relay-profile",
    ...(inspectorPort !== undefined ? { inspectorPort } : {}),
    ...(checkout !== undefined ? { checkout } : {}),
    capture: CAPTURE,
    agentDir: join(out, name),
    agentSettings: CPU_WINDOWS > 0 ? {} : { NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${out}` },
  });
  try {
    const keys = (await claimRelayed(ex.engine, { prefix: "p", n: CLAIMS, upstream: modelUrl, trainerKey: "sk-bench" })).map((c) => c.key);
    return {
      name,
      url: `${ex.url}/e/${ex.engine.name}/v1/chat/completions`,
      keys,
      pids: { workerd: ex.pids, proxy: ex.agent.pid },
      agent: ex.agent,
      relay: () => relayCounts(ex.engine),
      stop: ex.stop,
    };
  } catch (e) {
    await ex.stop();
    throw e;
  }
}

/** Relayed calls for `seconds` with CONCURRENCY in flight, each caller taking the keys in turn; answers how many. */
async function load(side: Side, seconds: number): Promise<number> {
  let calls = 0;
  const until = Date.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, w) => {
      for (let i = w; Date.now() < until; i += CONCURRENCY) {
        const res = await request(side.url, { method: "POST", headers: { authorization: `Bearer ${side.keys[i % side.keys.length]}`, "content-type": "application/json" }, body: BODY, dispatcher });
        await res.body.text();
        if (res.statusCode !== 200) throw new Error(`relayed call: ${res.statusCode}`);
        calls++;
      }
    }),
  );
  return calls;
}

type Window = { calls_per_s: number; workerd: number; proxy: number };

/** One window of SECONDS of load on `side`, with its processes' CPU per call from /proc. */
async function cpuWindow(side: Side): Promise<Window> {
  const meter = cpuMeter(side.pids.workerd);
  const agentMeter = cpuMeter([side.pids.proxy]);
  meter.start();
  agentMeter.start();
  const calls = await load(side, SECONDS);
  const cpu = meter.stop();
  const a = agentMeter.stop();
  const perCall = (pct: number | null): number => Math.round((((pct ?? 0) * 10 * cpu.wall_s) / calls) * 1000) / 1000;
  return { calls_per_s: Math.round(calls / cpu.wall_s), workerd: perCall(cpu.server_cpu_pct), proxy: perCall(a.server_cpu_pct) };
}

const round4 = (x: number): number => Math.round(x * 10_000) / 10_000;
const med = (xs: number[]): number => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)] ?? 0;
const medians = (rows: Window[]) => ({ calls_per_s: med(rows.map((r) => r.calls_per_s)), cpu_ms_per_call: { workerd: med(rows.map((r) => r.workerd)), proxy: med(rows.map((r) => r.proxy)) } });

/**
 * --against: this tree's relay and `dir`'s take turns window by window (A B, B A, ...), so that
 * the machine's slow and fast phases fall on both alike, and the report pairs their windows.
 * Both pairs of processes are started afresh every FRESH windows, the first side alternating: a
 * pair of processes keeps a bias of its own for its whole life (as bench:ab found of engines).
 */
async function compare(modelUrl: string, out: string, dir: string): Promise<void> {
  const rows = new Map<string, Window[]>([["this", []], ["against", []]]);
  /** Each pair's engine requests per relayed call, by side. */
  const requests = new Map<string, number[]>([["this", []], ["against", []]]);
  for (let first = 0; first < CPU_WINDOWS; first += FRESH) {
    const order: [string, string | undefined][] = [["this", undefined], ["against", dir]];
    if ((first / FRESH) % 2 === 1) order.reverse();
    const sides: Side[] = [];
    try {
      for (const [name, checkout] of order) sides.push(await startExchangeSide(name, modelUrl, join(out, String(first)), undefined, checkout));
      for (const side of sides) await load(side, 2);
      for (let w = first; w < Math.min(CPU_WINDOWS, first + FRESH); w++) {
        for (const side of w % 2 === 0 ? sides : [...sides].reverse()) {
          const r = await cpuWindow(side);
          rows.get(side.name)!.push(r);
          log(`window ${w + 1} ${side.name}: ${JSON.stringify(r)}`);
        }
      }
      for (const side of sides) {
        const r = await side.relay();
        if (r !== null) requests.get(side.name)!.push(r.engine_requests / Math.max(1, r.calls));
      }
    } finally {
      for (const side of sides) await side.stop();
    }
  }
  const mine = rows.get("this")!;
  const theirs = rows.get("against")!;
  const report = {
    against: dir,
    windows: CPU_WINDOWS,
    fresh_processes_every: FRESH,
    this: medians(mine),
    against_side: medians(theirs),
    workerd_ms_per_call: paired(mine.map((r) => r.workerd), theirs.map((r) => r.workerd)),
    gateway_ms_per_call: paired(mine.map((r) => r.proxy), theirs.map((r) => r.proxy)),
    engine_requests_per_call: { this: requests.get("this")!.map(round4), against: requests.get("against")!.map(round4) },
  };
  process.stdout.write(JSON.stringify(report, null, 2) + "\n");
}

async function main(): Promise<void> {
  const out = arg("--out") ?? mkdtempSync(join(tmpdir(), "relay-profile-"));
  mkdirSync(out, { recursive: true });
  const against = arg("--against");
  if (against !== undefined && (CPU_WINDOWS === 0 || FLOOR)) throw new Error("--against DIR compares CPU per call: use it with --cpu W, without --floor");
  const model = await startModelServer({ latencyMs: 0 });
  const inspectorPort = await freePort();
  const sides: Side[] = [];
  try {
    if (against !== undefined) {
      await compare(model.url, out, resolve(against));
      return;
    }
    if (FLOOR) {
      const floor = await startRelayFloor({ upstream: model.url, inspectorPort });
      sides.push({ name: "floor", url: `${floor.url}/v1/chat/completions`, keys: ["sk-bench"], pids: { workerd: floor.pids, proxy: floor.proxyPid }, agent: null, relay: async () => null, stop: () => floor.stop() });
    } else {
      sides.push(await startExchangeSide("this", model.url, out, inspectorPort));
    }
    await load(sides[0]!, 2);
    if (CPU_WINDOWS > 0) {
      const rows: Window[] = [];
      for (let w = 0; w < CPU_WINDOWS; w++) {
        rows.push(await cpuWindow(sides[0]!));
        log(`window ${w + 1}: ${JSON.stringify(rows.at(-1))}`);
      }
      const relay = await sides[0]!.relay();
      process.stdout.write(JSON.stringify({ ...medians(rows), ...(relay ? { engine_requests_per_call: round4(relay.engine_requests / Math.max(1, relay.calls)) } : {}) }) + "\n");
      return;
    }
    const side = sides[0]!;
    const dt = await devtools(inspectorPort);
    await dt.send("Profiler.enable");
    await dt.send("Profiler.setSamplingInterval", { interval: 200 });
    await dt.send("Profiler.start");
    log(`profiling ${SECONDS} s of relayed calls, ${CONCURRENCY} in flight over ${CLAIMS} claims`);
    const calls = await load(side, SECONDS);
    const { profile } = (await dt.send("Profiler.stop")) as { profile: Profile };
    dt.close();
    log(`${calls} calls (${Math.round(calls / SECONDS)}/s)`);
    writeFileSync(join(out, "workerd.cpuprofile"), JSON.stringify(profile));
    process.stdout.write([FLOOR ? "workerd (the floor's bare Worker):" : "workerd (the Worker and the engine):", ...selfTimes(profile, TOP), ""].join("\n") + "\n");
    if (side.agent === null) return;
    await side.agent.stop();
    const agentProfile = readdirSync(out).find((f) => f.endsWith(".cpuprofile") && f.startsWith("CPU."));
    if (agentProfile === undefined) throw new Error(`the agent wrote no profile to ${out}`);
    const p = JSON.parse(readFileSync(join(out, agentProfile), "utf8")) as Profile;
    process.stdout.write(["the agent (its gateway; the whole run, set-up included):", ...selfTimes(p, TOP), ""].join("\n") + "\n");
    log(`profiles in ${out}`);
  } finally {
    for (const side of sides) await side.stop();
    await model.close();
    await dispatcher.close();
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`bench:relay-profile failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
