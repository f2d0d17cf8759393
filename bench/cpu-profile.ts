/**
 * `npm run bench:cpu`: where the engine's CPU goes under the benchmark's load, by function.
 *
 * Starts the exchange with workerd's V8 inspector open, drives one engine with the load
 * generator, and records a sampling CPU profile of every JavaScript isolate in workerd over
 * the measured window (the Chrome DevTools protocol's Profiler domain). Writes each profile
 * to bench/results/<isolate>.cpuprofile (open it in Chrome DevTools or speedscope) and prints
 * the functions with the most self time, and the share that is native work V8 cannot see
 * into (SQLite, I/O, garbage collection).
 *
 * Flags: --clients N (32) --episodes N (256) --duration S (10) --warmup S (3) --top N (30)
 *        --op register: profile N (--n, 3000) register_episode calls one at a time instead
 */
import { randomBytes, randomUUID } from "node:crypto";
import { mkdir, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";
import { AdminClient } from "../src/client";
import { startLocalExchange } from "../scripts/local/exchange";
import { Http, parseFlags, prepareEngine, runLoad } from "./loadgen";
import { workerdPids } from "./stats";

type CallFrame = { functionName: string; url: string; lineNumber: number; columnNumber: number };
type ProfileNode = { id: number; callFrame: CallFrame; children?: number[] };
type CpuProfile = { nodes: ProfileNode[]; startTime: number; endTime: number; samples: number[]; timeDeltas: number[] };
type Target = { id: string; title: string; webSocketDebuggerUrl: string };

const flags = parseFlags(process.argv.slice(2));
const num = (k: string, d: number) => Number(flags.get(k) ?? d);
const log = (line: string) => process.stderr.write(`[cpu-profile] ${line}\n`);

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => (typeof a === "object" && a ? resolve(a.port) : reject(new Error("no port"))));
    });
  });
}

/** A minimal DevTools-protocol session: numbered requests, answers matched by id. */
class Cdp {
  private next = 1;
  private waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private constructor(private readonly ws: WebSocket) {
    ws.addEventListener("message", (ev) => {
      const msg = JSON.parse(String(ev.data)) as { id?: number; result?: unknown; error?: { message: string } };
      if (msg.id === undefined) return;
      const w = this.waiting.get(msg.id);
      this.waiting.delete(msg.id);
      if (msg.error) w?.reject(new Error(msg.error.message));
      else w?.resolve(msg.result);
    });
  }
  static open(url: string): Promise<Cdp> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url);
      ws.addEventListener("open", () => resolve(new Cdp(ws)), { once: true });
      ws.addEventListener("error", () => reject(new Error(`cannot open ${url}`)), { once: true });
    });
  }
  send<T>(method: string, params: Record<string, unknown> = {}): Promise<T> {
    const id = this.next++;
    this.ws.send(JSON.stringify({ id, method, params }));
    return new Promise<T>((resolve, reject) => this.waiting.set(id, { resolve: resolve as (v: unknown) => void, reject }));
  }
  close(): void {
    this.ws.close();
  }
}

/** Self time per function (ms), from the sample counts and the time between samples. */
function selfTimes(p: CpuProfile): { total: number; rows: { name: string; ms: number }[] } {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const ms = new Map<string, number>();
  let total = 0;
  p.samples.forEach((id, i) => {
    const dt = (p.timeDeltas[i] ?? 0) / 1000;
    total += dt;
    const f = byId.get(id)?.callFrame;
    const file = f?.url ? f.url.split("/").pop() : "";
    const name = f ? `${f.functionName || "(anonymous)"}${file ? ` ${file}:${f.lineNumber + 1}` : ""}` : "?";
    ms.set(name, (ms.get(name) ?? 0) + dt);
  });
  return { total, rows: [...ms].map(([name, v]) => ({ name, ms: v })).sort((a, b) => b.ms - a.ms) };
}

async function main(): Promise<void> {
  const inspectorPort = await freePort();
  const adminToken = `cpu-admin-${randomBytes(12).toString("hex")}`;
  const before = new Set(workerdPids());
  const ex = await startLocalExchange({ port: 0, persistDir: null, adminToken, claimKeySecret: randomBytes(32).toString("hex"), inspectorPort, log });
  try {
    const pids = workerdPids().filter((p) => !before.has(p));
    const admin = new AdminClient({ origin: ex.url, adminToken });
    const created = await admin.createEngine(`cpu-${randomBytes(3).toString("hex")}`);
    const baseUrl = `${ex.url}/e/${created.engine}`;
    const targets = (await (await fetch(`http://127.0.0.1:${inspectorPort}/json/list`)).json()) as Target[];
    const sessions = await Promise.all(targets.map(async (t) => ({ t, cdp: await Cdp.open(t.webSocketDebuggerUrl) })));
    log(`isolates: ${targets.map((t) => t.title).join(", ")}`);
    const startProfiling = async () => {
      for (const s of sessions) {
        await s.cdp.send("Profiler.enable");
        await s.cdp.send("Profiler.setSamplingInterval", { interval: 200 });
        await s.cdp.send("Profiler.start");
      }
    };
    const op = flags.get("op");
    const clients = num("clients", 32);
    const episodes = num("episodes", 256);
    let headline: string;
    if (op === "register") {
      // One operation alone, one request at a time: its own cost without the others'.
      const http = new Http(baseUrl, 1);
      await prepareEngine(http, created.tokens.trainer!, 0);
      await startProfiling();
      const n = num("n", 3000);
      const t = performance.now();
      for (let i = 0; i < n; i++) await http.call("POST", "/register_episode", created.tokens.trainer!, { episode_uuid: randomUUID() });
      headline = `register_episode x ${n}: ${((performance.now() - t) / n).toFixed(2)} ms each`;
      await http.close();
    } else {
      const result = await runLoad({
        baseUrl,
        clientToken: created.tokens.client!,
        trainerToken: created.tokens.trainer!,
        clients,
        episodes,
        durationSec: num("duration", 10),
        warmupSec: num("warmup", 3),
        serverPids: pids,
        log,
        // Profiling starts when the clients do; the setup's registrations are not the hot loop.
        beforeLoad: startProfiling,
      });
      headline = `${clients}x${episodes}: ${result.cycles_per_s.toFixed(1)} cycles/s, workerd CPU ${result.server_cpu_ms_per_cycle} ms per cycle (profiler running)`;
    }
    const outDir = fileURLToPath(new URL("./results/", import.meta.url));
    await mkdir(outDir, { recursive: true });
    const top = num("top", 30);
    console.log(headline);
    for (const s of sessions) {
      const { profile } = await s.cdp.send<{ profile: CpuProfile }>("Profiler.stop");
      s.cdp.close();
      const file = `${outDir}${s.t.title.replace(/[^a-zA-Z0-9_-]+/g, "_") || s.t.id}.cpuprofile`;
      await writeFile(file, JSON.stringify(profile));
      const { total, rows } = selfTimes(profile);
      const busy = rows.filter((r) => !r.name.startsWith("(idle)")).reduce((a, r) => a + r.ms, 0);
      console.log(`\nisolate '${s.t.title}': ${busy.toFixed(0)} ms busy of ${total.toFixed(0)} ms sampled (${file})`);
      for (const r of rows.filter((r) => !r.name.startsWith("(idle)")).slice(0, top)) {
        console.log(`  ${((100 * r.ms) / Math.max(busy, 1)).toFixed(1).padStart(5)}%  ${r.ms.toFixed(0).padStart(6)} ms  ${r.name}`);
      }
    }
  } finally {
    await ex.stop();
  }
}

await main();
