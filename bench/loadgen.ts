/**
 * The load generator: drives one engine with N concurrent rollout clients. Each client loops
 *   claim_episode -> end_episode -> (as the trainer) register_episode of a fresh episode
 * so the pool stays at its size. Before the run the trainer sets the engine ROLLING and
 * registers P episodes. Cycles/s and claim/end/register latency are measured over a fixed
 * window after a warm-up.
 *
 * HTTP goes through one undici Pool with a keep-alive connection per client (plus spare), so
 * no request ever waits for a socket; the report carries this process's CPU use so you can
 * check the client is not the bottleneck.
 *
 * Also a CLI, for any server that speaks the swarm protocol (the seed, wrangler dev, ...):
 *   tsx bench/loadgen.ts --url http://127.0.0.1:8787/e/default --client-token T --trainer-token T \
 *     [--clients 32] [--episodes 256] [--duration 30] [--warmup 5]
 */
import { randomUUID } from "node:crypto";
import { Pool } from "undici";
import { cpuMeter, summarize, type CpuUse, type Latency } from "./stats";

export type LoadOptions = {
  /** The engine's base URL, `http://host:port/e/<engine>`. */
  baseUrl: string;
  clientToken: string;
  trainerToken: string;
  clients: number;
  /** Registered episodes kept in the pool. */
  episodes: number;
  durationSec: number;
  warmupSec: number;
  /** Set ROLLING and register `episodes` first (default true). */
  setup?: boolean;
  label?: string;
  /** Other processes whose CPU use is reported for the window (the workerd serving the engine). */
  serverPids?: number[];
  /** Called after setup, just before the clients start (the bench waits for a quiet machine here). */
  beforeLoad?: () => Promise<void>;
  log?: (line: string) => void;
};

export type LoadResult = {
  label: string;
  clients: number;
  episodes: number;
  warmup_s: number;
  duration_s: number;
  cycles: number;
  cycles_per_s: number;
  claim_ms: Latency;
  end_ms: Latency;
  register_ms: Latency;
  cycle_ms: Latency;
  /** Claims answered "No available episodes" (the client retries after 10 ms). */
  retries: number;
  errors: number;
  /** Every successful end_episode of the run, warm-up and tail included (the engine's finished rows). */
  ended_total: number;
  error_samples: string[];
  /** CPU over the window, % of one core (this machine has 2): see CpuUse. */
  loadgen_cpu_pct: number;
  server_cpu_pct: number | null;
  other_cpu_pct: number;
  /** workerd CPU per measured cycle, ms: the server's cost of one claim + end + register. */
  server_cpu_ms_per_cycle: number | null;
  setup_s: number;
};

const NO_EPISODES = "No available episodes";

type Answer = { status: number; body: Record<string, unknown> };

/** A minimal keep-alive JSON client for the hot loop. */
export class Http {
  readonly pool: Pool;
  private readonly basePath: string;
  constructor(baseUrl: string, connections: number) {
    const u = new URL(baseUrl);
    this.pool = new Pool(u.origin, { connections, pipelining: 1, keepAliveTimeout: 60_000, keepAliveMaxTimeout: 600_000 });
    this.basePath = u.pathname.replace(/\/+$/, "");
  }
  async call(method: "GET" | "POST", path: string, token: string, body?: unknown): Promise<Answer> {
    const headers: Record<string, string> = { authorization: `Bearer ${token}` };
    if (body !== undefined) headers["content-type"] = "application/json";
    const res = await this.pool.request({
      method,
      path: this.basePath + path,
      headers,
      body: body === undefined ? null : JSON.stringify(body),
    });
    const text = await res.body.text();
    let json: Record<string, unknown>;
    try {
      json = JSON.parse(text) as Record<string, unknown>;
    } catch {
      json = { error: "bad_response", detail: text.slice(0, 200) };
    }
    return { status: res.statusCode, body: json };
  }
  close(): Promise<void> {
    return this.pool.close();
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs `n` tasks with at most `width` in flight. */
export async function inParallel(n: number, width: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, n) }, async () => {
      while (next < n) await task(next++);
    }),
  );
}

function describe(what: string, a: Answer): string {
  return `${what}: HTTP ${a.status} ${JSON.stringify(a.body).slice(0, 300)}`;
}

/** Sets the engine ROLLING and registers `episodes` fresh episodes as the trainer. */
export async function prepareEngine(http: Http, trainerToken: string, episodes: number, log?: (l: string) => void): Promise<void> {
  const st = await http.call("POST", "/update_engine_status", trainerToken, { engine_status: "ENGINE.ROLLING" });
  if (st.status !== 200 || st.body["success"] !== true) throw new Error(describe("update_engine_status", st));
  let done = 0;
  await inParallel(episodes, 32, async () => {
    const r = await http.call("POST", "/register_episode", trainerToken, { episode_uuid: randomUUID() });
    if (r.status !== 200 || r.body["success"] !== true) throw new Error(describe("register_episode", r));
    if (++done % 2500 === 0) log?.(`  registered ${done}/${episodes}`);
  });
}

export async function runLoad(o: LoadOptions): Promise<LoadResult> {
  const label = o.label ?? `${o.clients}x${o.episodes}`;
  const log = o.log ?? (() => {});
  const http = new Http(o.baseUrl, o.clients + 8);
  try {
    const s0 = performance.now();
    if (o.setup !== false) await prepareEngine(http, o.trainerToken, o.episodes, log);
    const setupS = (performance.now() - s0) / 1000;
    await o.beforeLoad?.();

    const claimMs: number[] = [];
    const endMs: number[] = [];
    const registerMs: number[] = [];
    const cycleMs: number[] = [];
    let cycles = 0;
    let retries = 0;
    let errors = 0;
    let endedTotal = 0;
    const errorSamples: string[] = [];
    const meter = cpuMeter(o.serverPids ?? []);

    const t0 = performance.now();
    const windowStart = t0 + o.warmupSec * 1000;
    const windowEnd = windowStart + o.durationSec * 1000;
    let stopped = false;
    let measuring = false;
    const inWindow = (t: number) => t >= windowStart && t <= windowEnd;
    const fault = (msg: string) => {
      if (measuring) errors++;
      if (errorSamples.length < 5) errorSamples.push(msg);
    };

    const client = async (i: number) => {
      const clientUuid = `bench-client-${i}-${randomUUID()}`;
      let n = 0;
      while (!stopped) {
        const a = performance.now();
        let claim: Answer;
        try {
          claim = await http.call("POST", "/claim_episode", o.clientToken, { client_uuid: clientUuid, episode_type: "train", discard_episode_timeout: 60 });
        } catch (e) {
          fault(`claim_episode: ${String(e)}`);
          await sleep(10);
          continue;
        }
        const b = performance.now();
        if (claim.status !== 200 || claim.body["success"] !== true) {
          const cause = String(claim.body["fail_cause"] ?? "");
          if (claim.status === 200 && cause.includes(NO_EPISODES)) {
            if (inWindow(a)) retries++;
          } else fault(describe("claim_episode", claim));
          await sleep(10);
          continue;
        }
        if (inWindow(a)) claimMs.push(b - a);
        const episodeUuid = String(claim.body["episode_uuid"]);
        const taskId = `task-${i}-${n++ % 8}`;
        try {
          const end = await http.call("POST", "/end_episode", o.clientToken, {
            client_uuid: clientUuid,
            episode_uuid: episodeUuid,
            task_id: taskId,
            workflow_output: { reward: Math.random(), is_success: true, metadata: { task_id: taskId } },
          });
          const c = performance.now();
          if (end.status !== 200 || end.body["success"] !== true) {
            fault(describe("end_episode", end));
            await sleep(10);
            continue;
          }
          endedTotal++;
          if (inWindow(b)) endMs.push(c - b);
          const reg = await http.call("POST", "/register_episode", o.trainerToken, { episode_uuid: randomUUID() });
          const d = performance.now();
          if (reg.status !== 200 || reg.body["success"] !== true) {
            fault(describe("register_episode", reg));
            await sleep(10);
            continue;
          }
          if (inWindow(c)) registerMs.push(d - c);
          if (inWindow(a) && inWindow(d)) {
            cycles++;
            cycleMs.push(d - a);
          }
        } catch (e) {
          fault(`end/register: ${String(e)}`);
          await sleep(10);
        }
      }
    };

    const progress = setInterval(() => {
      const now = performance.now();
      if (now < windowStart) log(`  ${label}: warming up`);
      else log(`  ${label}: ${((now - windowStart) / 1000).toFixed(0)}/${o.durationSec}s, ${cycles} cycles, ${(cycles / ((now - windowStart) / 1000)).toFixed(0)}/s`);
    }, 10_000);
    let cpu: CpuUse | null = null;
    const timers = [
      setTimeout(() => {
        measuring = true;
        meter.start();
      }, windowStart - t0),
      setTimeout(() => {
        stopped = true;
        cpu = meter.stop();
      }, windowEnd - t0),
    ];
    try {
      await Promise.all(Array.from({ length: o.clients }, (_, i) => client(i)));
    } finally {
      clearInterval(progress);
      for (const t of timers) clearTimeout(t);
    }
    const usage = cpu ?? meter.stop();
    return {
      label,
      clients: o.clients,
      episodes: o.episodes,
      warmup_s: o.warmupSec,
      duration_s: o.durationSec,
      cycles,
      cycles_per_s: Math.round((cycles / o.durationSec) * 10) / 10,
      claim_ms: summarize(claimMs),
      end_ms: summarize(endMs),
      register_ms: summarize(registerMs),
      cycle_ms: summarize(cycleMs),
      retries,
      errors,
      ended_total: endedTotal,
      error_samples: errorSamples,
      loadgen_cpu_pct: usage.loadgen_cpu_pct,
      server_cpu_pct: usage.server_cpu_pct,
      other_cpu_pct: usage.other_cpu_pct,
      server_cpu_ms_per_cycle: usage.server_cpu_pct === null || cycles === 0 ? null : Math.round(((usage.server_cpu_pct * 10 * o.durationSec) / cycles) * 100) / 100,
      setup_s: Math.round(setupS * 10) / 10,
    };
  } finally {
    await http.close();
  }
}

/** `--name value` flags; `--flag` alone is "true". */
export function parseFlags(argv: string[]): Map<string, string> {
  const flags = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (!a.startsWith("--")) throw new Error(`unexpected argument ${a}`);
    const eq = a.indexOf("=");
    if (eq > 0) flags.set(a.slice(2, eq), a.slice(eq + 1));
    else if (i + 1 < argv.length && !argv[i + 1]!.startsWith("--")) flags.set(a.slice(2), argv[++i]!);
    else flags.set(a.slice(2), "true");
  }
  return flags;
}

async function main(): Promise<void> {
  const f = parseFlags(process.argv.slice(2));
  const url = f.get("url");
  if (!url) {
    console.error("usage: tsx bench/loadgen.ts --url http://host:port/e/<engine> [--client-token T] [--trainer-token T] [--clients 32] [--episodes 256] [--duration 30] [--warmup 5] [--no-setup]");
    process.exit(2);
  }
  const token = f.get("token") ?? "none";
  const result = await runLoad({
    baseUrl: url,
    clientToken: f.get("client-token") ?? token,
    trainerToken: f.get("trainer-token") ?? token,
    clients: Number(f.get("clients") ?? 32),
    episodes: Number(f.get("episodes") ?? 256),
    durationSec: Number(f.get("duration") ?? 30),
    warmupSec: Number(f.get("warmup") ?? 5),
    setup: !f.has("no-setup"),
    log: (l) => console.error(l),
  });
  console.log(JSON.stringify(result, null, 2));
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((e: unknown) => {
    console.error(e);
    process.exit(1);
  });
}
