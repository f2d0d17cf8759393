/**
 * The load generator: drives one engine with N concurrent rollout clients. Each client loops
 *   claim_episode -> end_episode -> (as the trainer) register_episode of a fresh episode
 * so the pool stays at its size. Before the run the trainer sets the engine ROLLING and
 * registers P episodes. Cycles/s and claim/end/register latency are measured over a fixed
 * window after a warm-up.
 *
 * The clients run in bench/load/closed-loop.ts's closed loop and speak through bench/load/http.ts
 * (a keep-alive connection per client, plus spare); the report carries this process's CPU use
 * so you can check the client is not the bottleneck.
 *
 * Also a CLI, for any server that speaks the swarm protocol (the seed, wrangler dev, ...):
 *   tsx bench/loadgen.ts --url http://127.0.0.1:8787/e/default --client-token T --trainer-token T \
 *     [--clients 32] [--episodes 256] [--duration 30] [--warmup 5]
 */
import { randomUUID } from "node:crypto";
import { parseFlags } from "./flags";
import { closedLoop, inParallel } from "./load/closed-loop";
import { Http, type Answer } from "./load/http";
import { summarize, type Latency } from "./stats";

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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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
    let retries = 0;
    let endedTotal = 0;
    const run = closedLoop({ workers: o.clients, warmupSec: o.warmupSec, durationSec: o.durationSec, label, unit: "cycles", serverPids: o.serverPids ?? [], log }, (i, w) => {
      const clientUuid = `bench-client-${i}-${randomUUID()}`;
      let n = 0;
      return async () => {
        const a = performance.now();
        let claim: Answer;
        try {
          claim = await http.call("POST", "/claim_episode", o.clientToken, { client_uuid: clientUuid, episode_type: "train", discard_episode_timeout: 60 });
        } catch (e) {
          w.fault(`claim_episode: ${String(e)}`);
          await sleep(10);
          return;
        }
        const b = performance.now();
        if (claim.status !== 200 || claim.body["success"] !== true) {
          const cause = String(claim.body["fail_cause"] ?? "");
          if (claim.status === 200 && cause.includes(NO_EPISODES)) {
            if (w.inWindow(a)) retries++;
          } else w.fault(describe("claim_episode", claim));
          await sleep(10);
          return;
        }
        if (w.inWindow(a)) claimMs.push(b - a);
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
            w.fault(describe("end_episode", end));
            await sleep(10);
            return;
          }
          endedTotal++;
          if (w.inWindow(b)) endMs.push(c - b);
          const reg = await http.call("POST", "/register_episode", o.trainerToken, { episode_uuid: randomUUID() });
          const d = performance.now();
          if (reg.status !== 200 || reg.body["success"] !== true) {
            w.fault(describe("register_episode", reg));
            await sleep(10);
            return;
          }
          if (w.inWindow(c)) registerMs.push(d - c);
          if (w.inWindow(a) && w.inWindow(d)) {
            w.counted++;
            cycleMs.push(d - a);
          }
        } catch (e) {
          w.fault(`end/register: ${String(e)}`);
          await sleep(10);
        }
      };
    });
    const usage = await run.done;
    const cycles = run.window.counted;
    const { errors, errorSamples } = run.window;
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
