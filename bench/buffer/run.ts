/**
 * `npm run bench:buffer [-- --quick] [-- --record]`: the rollout buffer on the real exchange
 * (bench/serve/exchange.ts, in memory, Miniflare), through the typed clients.
 *
 *  1. Step ingestion: rows/s with `--posters` concurrent clients (default 8) posting batches
 *     of 100 rows, each batch completing one group of 4 sessions.
 *  2. get_rollout_data latency (p50/p99) and the engine's CPU per pull with 10,000 pending
 *     (incomplete) groups versus 100: one engine each, measured in alternating rounds so drift
 *     on a shared machine lands on both alike. Each sample is a pull that gets the one group
 *     just made ready, then a pull with nothing ready. The claim under test: the cost does not
 *     grow with pending groups beyond a log factor (log 10,000 / log 100 = 2).
 *
 * Flags: --quick (smaller counts), --posters N, --batches N, --samples N (pulls per engine),
 * --quiet-wait S (wait up to S s for the machine to go quiet first; default 10, 0 = never),
 * --tmpdir DIR (default /dev/shm: Miniflare's unpersisted SQLite lives there, as in npm run bench),
 * --record (also write bench/buffer/recorded.{json,svg}, the run BENCHMARKS.md quotes; every run
 * writes bench/results/buffer-latest.{json,svg}).
 */
import { cpus, loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { parseFlags } from "../flags";
import { serveExchange } from "../serve/exchange";
import { cpuMeter, quietWaiter, stateInMemory, summarize, writeBenchOutputs } from "../stats";
import { renderBufferChart } from "./chart";
import { fillPending, ingest, round, timePulls } from "./workload";
import type { BufferBenchReport, PullResult } from "./report";

const f = parseFlags(process.argv.slice(2));
const quick = f.has("quick");
const POSTERS = Number(f.get("posters") ?? 8);
const BATCHES = Number(f.get("batches") ?? (quick ? 200 : 1000));
const SAMPLES = Number(f.get("samples") ?? (quick ? 60 : 300));
const ROUNDS = quick ? 2 : 5;
const GROUP_SIZE = 4;
const PENDING = [100, 10_000] as const;

const t0 = performance.now();
const log = (line: string) => process.stderr.write(`[bench:buffer ${((performance.now() - t0) / 1000).toFixed(0).padStart(4)}s] ${line}\n`);

async function main(): Promise<void> {
  stateInMemory(f.get("tmpdir"));
  const quiet = quietWaiter(Number(f.get("quiet-wait") ?? 10), log);

  const ex = await serveExchange({ log: (l) => log(`  exchange: ${l}`) });
  const pids = ex.pids;
  const newEngine = async (tag: string) => {
    const engine = await ex.newEngine(`buf-${tag}`);
    const trainer = engine.as("trainer");
    await trainer.startRollout({ num_repeat_per_sample: GROUP_SIZE, job_session: `bench-${tag}` });
    return { trainer, client: engine.as("client") };
  };

  try {
    const report: Omit<BufferBenchReport, "ingest" | "pulls" | "ratios"> = {
      started_at: new Date().toISOString(),
      machine: { cores: cpus().length, cpu: cpus()[0]?.model ?? "unknown", node: process.version, loadavg_at_start: loadavg().map((x) => round(x)) },
      settings: { posters: POSTERS, batches: BATCHES, samples_per_engine: SAMPLES, rounds: ROUNDS, group_size: GROUP_SIZE },
    };

    // 1. Ingestion, after an unmeasured warm-up on the same engine.
    const ing = await newEngine("ingest");
    await ingest(ing.client, { posters: POSTERS, batches: Math.max(20, BATCHES / 10), groupSize: GROUP_SIZE, tag: "warm" });
    await quiet("ingestion");
    log(`ingestion: ${BATCHES} batches of 100 rows from ${POSTERS} posters`);
    const ingested = await ingest(ing.client, { posters: POSTERS, batches: BATCHES, groupSize: GROUP_SIZE, tag: "m" });
    log(`  ${ingested.rows_per_s} rows/s, batch p50 ${ingested.batch_ms.p50} ms, p99 ${ingested.batch_ms.p99} ms, ${ingested.errors} errors`);

    // 2. Pulls with 100 and with 10,000 pending groups, in alternating rounds.
    const engines = [];
    for (const pending of PENDING) {
      const e = await newEngine(`p${pending}`);
      log(`filling an engine with ${pending} pending groups`);
      await fillPending(e.client, pending, "fill");
      for (let i = 0; i < 10; i++) await timePulls(e.trainer, GROUP_SIZE, "warm", i); // warm-up, unmeasured
      engines.push({ pending, ...e, ready: [] as number[], empty: [] as number[], cpuMs: 0, other: [] as number[] });
    }
    await quiet("the pulls");
    const perRound = Math.ceil(SAMPLES / ROUNDS);
    for (let r = 0; r < ROUNDS; r++) {
      for (const e of r % 2 === 0 ? engines : [...engines].reverse()) {
        const meter = cpuMeter(pids);
        meter.start();
        for (let i = 0; i < perRound; i++) {
          const t = await timePulls(e.trainer, GROUP_SIZE, `r${r}`, i);
          e.ready.push(t.ready);
          e.empty.push(t.empty);
        }
        const use = meter.stop();
        // Per round trip of post + two pulls: the pulls cannot be metered apart from the post.
        if (use.server_cpu_pct !== null) e.cpuMs += (use.server_cpu_pct / 100) * use.wall_s * 1000;
        e.other.push(use.other_cpu_pct);
      }
      log(`round ${r + 1} of ${ROUNDS} done`);
    }
    const pulls: PullResult[] = engines.map((e) => ({
      pending_groups: e.pending,
      ready_pull_ms: summarize(e.ready),
      empty_pull_ms: summarize(e.empty),
      server_cpu_ms_per_sample: pids.length > 0 ? round(e.cpuMs / e.ready.length) : null,
      other_cpu_pct: round(Math.max(...e.other), 1),
    }));
    const [small, big] = pulls as [PullResult, PullResult];
    const ratio = (a: number, b: number) => (a > 0 ? round(b / a) : 0);
    const full: BufferBenchReport = {
      ...report,
      ingest: ingested,
      pulls,
      ratios: {
        ready_p50: ratio(small.ready_pull_ms.p50, big.ready_pull_ms.p50),
        ready_p99: ratio(small.ready_pull_ms.p99, big.ready_pull_ms.p99),
        empty_p50: ratio(small.empty_pull_ms.p50, big.empty_pull_ms.p50),
        cpu_per_sample: small.server_cpu_ms_per_sample && big.server_cpu_ms_per_sample ? ratio(small.server_cpu_ms_per_sample, big.server_cpu_ms_per_sample) : null,
      },
    };
    for (const p of pulls) log(`pending ${p.pending_groups}: ready pull p50 ${p.ready_pull_ms.p50} ms p99 ${p.ready_pull_ms.p99} ms; empty pull p50 ${p.empty_pull_ms.p50} ms; engine CPU ${p.server_cpu_ms_per_sample} ms per post+2 pulls`);
    log(`10,000 over 100 pending: ${JSON.stringify(full.ratios)} (a log factor would be 2)`);

    const json = JSON.stringify(full, null, 2) + "\n";
    await writeBenchOutputs(fileURLToPath(new URL(".", import.meta.url)), "buffer", json, renderBufferChart(full), f.has("record"));
    process.stdout.write(json);
  } finally {
    await ex.stop();
  }
}

await main();
