/**
 * `npm run bench:atropos [-- --quick] [-- --record]`: the Atropos API (src/atropos) on the real
 * exchange (scripts/local/exchange.ts, in memory, Miniflare), over HTTP with the token in the
 * URL, as Atropos's BaseEnv and trainers call it.
 *
 *  1. /scored_data ingestion: groups/s with `--posters` concurrent environments (default 8),
 *     each group 8 sequences of 512 tokens with masks and scores (about 25 KB of JSON), posted
 *     one per request (/scored_data) and 16 per request (/scored_data_list).
 *  2. /batch latency with 100 and with 100,000 queued groups: one engine each, measured in
 *     alternating rounds. The queued groups are groups of 3 sequences, which never pack with
 *     the groups of 4 the samples bring (3 does not divide 4): they stay queued through every
 *     sample, as a backlog of groups the trainer has not taken does, and Atropos's run-api reads
 *     all of them on every /batch. Each sample posts one batch of 4 groups of 4 (batch_size 16)
 *     and times the /batch that cuts and returns it, then a /batch with nothing to cut. The
 *     claim under test: both cost the same with 100 or 100,000 queued groups.
 *
 * Flags: --quick, --posters N, --groups N (ingested per mode), --samples N (per engine),
 * --quiet-wait S (default 10, 0 = never), --tmpdir DIR (default /dev/shm), --record (also write
 * bench/atropos/recorded.json, the run BENCHMARKS.md quotes; every run writes
 * bench/results/atropos-latest.json).
 */
import { mkdir, writeFile } from "node:fs/promises";
import { cpus, loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { parseFlags } from "../flags";
import { inParallel } from "../load/closed-loop";
import { serveExchange } from "../serve/exchange";
import { quietWaiter, stateInMemory, summarize } from "../stats";
import { round } from "../buffer/workload";

const f = parseFlags(process.argv.slice(2));
const quick = f.has("quick");
const POSTERS = Number(f.get("posters") ?? 8);
const GROUPS = Number(f.get("groups") ?? (quick ? 400 : 2000));
const SAMPLES = Number(f.get("samples") ?? (quick ? 40 : 200));
const ROUNDS = quick ? 2 : 5;
const QUEUED = [100, 100_000] as const;
const BATCH = 16;

const t0 = performance.now();
const log = (line: string) => process.stderr.write(`[bench:atropos ${((performance.now() - t0) / 1000).toFixed(0).padStart(4)}s] ${line}\n`);

/** A scored group of `n` sequences of `len` tokens, as BaseEnv posts it. */
function group(n: number, len: number, envId: number, tag: number) {
  const seq = (i: number) => Array.from({ length: len }, (_, t) => (tag * 7919 + i * 31 + t) % 151_000);
  return {
    tokens: Array.from({ length: n }, (_, i) => seq(i)),
    masks: Array.from({ length: n }, (_, i) => seq(i).map((t, j) => (j < len / 4 ? -100 : t))),
    scores: Array.from({ length: n }, (_, i) => (i % 2 === 0 ? 1.0 : -1.0)),
    env_id: envId,
  };
}

type Api = { get(path: string): Promise<unknown>; post(path: string, body: unknown): Promise<unknown> };

function api(base: string): Api {
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${base}${path}`, { method, headers: body === undefined ? {} : { "content-type": "application/json" }, body: body === undefined ? null : JSON.stringify(body) });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`${method} ${path}: HTTP ${res.status} ${text.slice(0, 300)}`);
    return JSON.parse(text) as unknown;
  };
  return { get: (p) => call("GET", p), post: (p, b) => call("POST", p, b) };
}

async function main(): Promise<void> {
  stateInMemory(f.get("tmpdir"));
  const quiet = quietWaiter(Number(f.get("quiet-wait") ?? 10), log);
  const ex = await serveExchange({ prefix: "atropos", log: (l) => log(`  exchange: ${l}`) });
  /** An engine with a registered trainer (batch_size 16), started, and one env of group size 4. */
  const newEngine = async (tag: string) => {
    const engine = await ex.newEngine(`atr-${tag}`);
    const at = (role: "trainer" | "client") => api(`${engine.baseUrl}/t/${engine.tokens[role]}/atropos`);
    const trainer = at("trainer");
    await trainer.post("/register", { wandb_group: "b", wandb_project: "b", batch_size: BATCH, max_token_len: 4096, checkpoint_dir: "", save_checkpoint_interval: 0, starting_step: 0, num_steps: 1_000_000 });
    await trainer.get("/batch");
    const env = at("client");
    await env.post("/register-env", { max_token_length: 4096, desired_name: "bench", weight: 1, group_size: 4, min_batch_allocation: null });
    return { trainer, env };
  };

  try {
    // 1. Ingestion, each mode after an unmeasured warm-up, on an engine of its own.
    const ingest = async (list: boolean) => {
      const e = await newEngine(list ? "list" : "one");
      await e.trainer.post("/config", { max_groups: 1_000_000 });
      const per = list ? 16 : 1;
      const send = async (i: number) => {
        const groups = Array.from({ length: per }, (_, k) => group(8, 512, 0, i * per + k));
        await (list ? e.env.post("/scored_data_list", groups) : e.env.post("/scored_data", groups[0]));
      };
      await inParallel(Math.max(4, Math.ceil(GROUPS / per / 10)), POSTERS, send);
      await quiet(`ingestion (${list ? "/scored_data_list" : "/scored_data"})`);
      const requests = Math.ceil(GROUPS / per);
      const started = performance.now();
      const ms: number[] = [];
      await inParallel(requests, POSTERS, async (i) => {
        const t = performance.now();
        await send(i);
        ms.push(performance.now() - t);
      });
      const seconds = (performance.now() - started) / 1000;
      const r = { route: list ? "/scored_data_list (16 groups a request)" : "/scored_data", groups: requests * per, groups_per_s: round((requests * per) / seconds, 0), request_ms: summarize(ms) };
      log(`${r.route}: ${r.groups_per_s} groups/s, request p50 ${r.request_ms.p50} ms, p99 ${r.request_ms.p99} ms`);
      return r;
    };
    const ingestion = [await ingest(false), await ingest(true)];

    // 2. /batch with 100 and 100,000 queued groups that never pack.
    type Measured = { queued: number; trainer: Api; env: Api; cut: number[]; empty: number[] };
    const engines: Measured[] = [];
    for (const queued of QUEUED) {
      const e = await newEngine(`q${queued}`);
      log(`queueing ${queued} groups of 3`);
      const chunk = 500;
      await inParallel(Math.ceil(queued / chunk), 4, async (i) => {
        const n = Math.min(chunk, queued - i * chunk);
        await e.env.post("/scored_data_list", Array.from({ length: n }, (_, k) => ({ ...group(3, 4, 0, i * chunk + k), env_id: null })));
      });
      const status = (await e.trainer.get("/status")) as { queue_size: number };
      if (status.queue_size !== queued) throw new Error(`expected ${queued} queued groups, found ${status.queue_size}`);
      engines.push({ queued, ...e, cut: [] as number[], empty: [] as number[] });
    }
    const sample = async (e: Measured, record: boolean) => {
      await e.env.post("/scored_data_list", Array.from({ length: BATCH / 4 }, (_, k) => group(4, 64, 0, k)));
      let t = performance.now();
      const got = (await e.trainer.get("/batch")) as { batch: unknown[] | null };
      const cut = performance.now() - t;
      if (got.batch?.length !== BATCH / 4) throw new Error(`expected a batch of ${BATCH / 4} groups, got ${JSON.stringify(got).slice(0, 200)}`);
      t = performance.now();
      await e.trainer.get("/batch");
      const empty = performance.now() - t;
      if (record) {
        e.cut.push(cut);
        e.empty.push(empty);
      }
    };
    for (const e of engines) for (let i = 0; i < 10; i++) await sample(e, false);
    await quiet("the /batch samples");
    const perRound = Math.ceil(SAMPLES / ROUNDS);
    for (let r = 0; r < ROUNDS; r++) {
      for (const e of r % 2 === 0 ? engines : [...engines].reverse()) for (let i = 0; i < perRound; i++) await sample(e, true);
      log(`round ${r + 1} of ${ROUNDS} done`);
    }
    const batches = engines.map((e) => ({ queued_groups: e.queued, cutting_batch_ms: summarize(e.cut), empty_batch_ms: summarize(e.empty) }));
    const [small, big] = batches as [(typeof batches)[number], (typeof batches)[number]];
    const ratio = (a: number, b: number) => (a > 0 ? round(b / a) : 0);
    const ratios = { cutting_p50: ratio(small.cutting_batch_ms.p50, big.cutting_batch_ms.p50), cutting_p99: ratio(small.cutting_batch_ms.p99, big.cutting_batch_ms.p99), empty_p50: ratio(small.empty_batch_ms.p50, big.empty_batch_ms.p50) };
    for (const b of batches) log(`${b.queued_groups} queued: /batch that cuts p50 ${b.cutting_batch_ms.p50} ms p99 ${b.cutting_batch_ms.p99} ms; empty /batch p50 ${b.empty_batch_ms.p50} ms`);
    log(`100,000 over 100 queued: ${JSON.stringify(ratios)}`);

    const report = {
      started_at: new Date().toISOString(),
      machine: { cores: cpus().length, cpu: cpus()[0]?.model ?? "unknown", node: process.version, loadavg_at_start: loadavg().map((x) => round(x)) },
      settings: { posters: POSTERS, groups: GROUPS, samples_per_engine: SAMPLES, rounds: ROUNDS, batch_size: BATCH },
      ingestion,
      batches,
      ratios,
    };
    const dir = fileURLToPath(new URL(".", import.meta.url));
    await mkdir(`${dir}../results`, { recursive: true });
    const json = JSON.stringify(report, null, 2) + "\n";
    await writeFile(`${dir}../results/atropos-latest.json`, json);
    if (f.has("record")) await writeFile(`${dir}recorded.json`, json);
    process.stdout.write(json);
  } finally {
    await ex.stop();
  }
}

await main();
