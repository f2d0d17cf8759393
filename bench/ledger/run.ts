/**
 * npm run bench:ledger [-- --claims N] [-- --calls-per-claim K] [-- --concurrency C] [-- --out FILE.json] [-- --svg FILE.svg]
 *
 * The trajectory ledger at volume, on the local exchange (Miniflare, state persisted in a temp
 * folder so that D1's and R2's files can be measured):
 *  1. ingest: N claims (default 10,000) registered, claimed and ended through the engine API;
 *     for each, K calls (default 10) posted to `<engine>/agent/calls` as the gateway posts them
 *     (delta-encoded bodies with packed token ids, ./workload.ts), 500 calls a batch, C batches in
 *     flight (default 4): calls/s, batches/s, batch latency;
 *  2. storage: D1's SQLite files (with -wal) and R2's files before and after the calls, per call;
 *     after the exchange stops, D1's llm_calls table and indexes exactly (SQLite's dbstat);
 *  3. export: once every trajectory is in D1, `GET <engine>/trajectories/export` read whole:
 *     MB/s, trajectories/s, calls/s, and the workerd processes' RSS every 100 ms, which must stay
 *     flat whatever the export's size.
 * Prints one JSON document; --out writes it (with the export's samples), --svg the export's chart;
 * --render FILE.json [--svg FILE.svg] draws the chart of an earlier run.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { DatabaseSync } from "node:sqlite";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { MAX_CALLS_PER_BATCH, type CallRecord } from "../../src/protocol/ledger";
import { inParallel } from "../load/closed-loop";
import { createEngine, serveExchange } from "../serve/exchange";
import { summarize } from "../stats";
import { renderLedgerChart } from "./chart";
import { claimCalls, type ClaimRef } from "./workload";

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const CLAIMS = Number(arg("--claims") ?? 10_000);
const CALLS_PER_CLAIM = Number(arg("--calls-per-claim") ?? 10);
const IN_FLIGHT = Number(arg("--concurrency") ?? 4);
const BATCH = MAX_CALLS_PER_BATCH;
const ADMIN = "bench-ledger-admin";
const log = (m: string): void => void process.stderr.write(`[bench:ledger] ${m}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const round = (x: number, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

/** Runs `fn` over `items` with at most `limit` at once. */
const pool = <T>(items: T[], limit: number, fn: (item: T, i: number) => Promise<void>): Promise<void> => inParallel(items.length, limit, (i) => fn(items[i] as T, i));

/** Every file under `dir` (recursively) whose path passes `keep`, with its size. */
function filesUnder(dir: string, keep: (path: string) => boolean = () => true): { path: string; bytes: number }[] {
  const out: { path: string; bytes: number }[] = [];
  let entries: string[];
  try {
    entries = readdirSync(dir);
  } catch {
    return out;
  }
  for (const name of entries) {
    const p = join(dir, name);
    const s = statSync(p, { throwIfNoEntry: false });
    if (s === undefined) continue;
    if (s.isDirectory()) out.push(...filesUnder(p, keep));
    else if (keep(p)) out.push({ path: p, bytes: s.size });
  }
  return out;
}
const sum = (fs: { bytes: number }[]) => fs.reduce((a, f) => a + f.bytes, 0);

/** Miniflare's persisted D1 databases: `<persist>/d1/**.sqlite` and their -wal (the -shm is an index of the WAL, not data). */
const d1Files = (persist: string) => filesUnder(join(persist, "d1"), (p) => p.endsWith(".sqlite") || p.endsWith(".sqlite-wal"));
/** R2: its metadata database and the blobs of the objects. */
const r2Files = (persist: string) => filesUnder(join(persist, "r2"));

/** Resident memory of the processes, in MB (VmRSS), summed. */
function rssMb(pids: number[]): number {
  let kb = 0;
  for (const pid of pids) {
    try {
      const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
      kb += Number(m?.[1] ?? 0);
    } catch {
      // gone
    }
  }
  return round(kb / 1024);
}

/** Bytes of each table with its indexes in a closed SQLite file (dbstat), and its row count when asked. */
function tableBytes(file: string, table: string): { bytes: number; rows: number } {
  const db = new DatabaseSync(file, { readOnly: true });
  try {
    const pages = db
      .prepare(`SELECT SUM(d.pgsize) AS bytes FROM dbstat d JOIN sqlite_master m ON m.name = d.name WHERE m.tbl_name = ?`)
      .get(table) as { bytes: number | null } | undefined;
    const rows = db.prepare(`SELECT COUNT(*) AS n FROM "${table}"`).get() as { n: number };
    return { bytes: Number(pages?.bytes ?? 0), rows: Number(rows.n) };
  } finally {
    db.close();
  }
}

type ExportFigures = {
  trajectories: number;
  calls: number;
  mb: number;
  seconds: number;
  mb_per_s: number;
  trajectories_per_s: number;
  workerd_rss_mb: { start: number; peak: number; end: number; peak_minus_start: number };
  samples: { t: number; exported: number; rss_mb: number }[];
};

function writeChart(svg: string, e: ExportFigures): void {
  const rss = e.workerd_rss_mb;
  writeFileSync(
    svg,
    renderLedgerChart({
      samples: e.samples,
      total: e.trajectories,
      title: `Export of ${e.trajectories.toLocaleString("en")} trajectories: ${e.mb_per_s} MB/s, workerd RSS +${Math.round(rss.peak_minus_start)} MB at peak`,
      summary: `${e.calls.toLocaleString("en")} calls, ${e.mb} MB in ${e.seconds} s (${e.trajectories_per_s} trajectories/s); RSS start ${rss.start} MB, peak ${rss.peak}, end ${rss.end}`,
    }),
  );
  log(`chart: ${svg}`);
}

async function main(): Promise<void> {
  // --render FILE.json --svg FILE.svg: only the chart of an earlier run.
  const render = arg("--render");
  if (render) return writeChart(arg("--svg") ?? render.replace(/\.json$/, ".svg"), (JSON.parse(readFileSync(render, "utf8")) as { export: ExportFigures }).export);
  const startedAt = new Date().toISOString();
  // Miniflare fsyncs every commit; on tmpfs that is memory, as the relay benchmark does (and D1's
  // files are measured the same wherever they live).
  if (process.env["TMPDIR"] === undefined && existsSync("/dev/shm")) process.env["TMPDIR"] = "/dev/shm";
  const base = mkdtempSync(join(tmpdir(), "bench-ledger-"));
  const persist = join(base, "state");
  const ex = await serveExchange({ persistDir: persist, adminToken: ADMIN, claimKeySecret: "bench-ledger-claim-secret", log: (l) => (/warn|error|fatal|crash/i.test(l) ? log(l) : undefined) });
  let stopped = false;
  try {
    const pids = ex.pids;
    const engine = await createEngine(ex.url, ADMIN, "bench-ledger");
    const engineUrl = engine.baseUrl;
    const trainerToken = engine.trainerToken;
    const trainer = engine.as("trainer");
    const client = engine.as("client");
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    log(`exchange ${ex.url}, state in ${persist}; workerd pids ${pids.join(", ")}`);

    // ------------------------------------------------------------ claims
    const tClaims = performance.now();
    for (let i = 0; i < CLAIMS; i += 1000) {
      const episodes = Array.from({ length: Math.min(1000, CLAIMS - i) }, (_, k) => ({ episode_uuid: `ep-${i + k}` }));
      const r = await trainer.batchRegisterEpisodes({ episodes });
      if (r.results.some((x) => !x.success)) throw new Error(`register: ${r.results.find((x) => !x.success)?.failure_reason}`);
    }
    const claims: ClaimRef[] = [];
    await pool(Array.from({ length: CLAIMS }, (_, i) => i), 8, async (i) => {
      const c = await client.claimEpisode({ client_uuid: `client-${i}`, discard_episode_timeout: 36_000 });
      if (!c.success || c.fence === undefined) throw new Error(`claim ${i}: ${c.fail_cause}`);
      claims.push({ episode_uuid: c.episode_uuid, fence: c.fence, client_uuid: `client-${i}` });
      if (claims.length % 2000 === 0) log(`${claims.length} claimed`);
    });
    const claimSeconds = (performance.now() - tClaims) / 1000;
    log(`${CLAIMS} registered and claimed in ${claimSeconds.toFixed(1)} s`);

    // ------------------------------------------------------------ ingest
    const calls: CallRecord[] = claims.flatMap((c) => claimCalls(c, CALLS_PER_CLAIM));
    const batches: string[] = [];
    for (let i = 0; i < calls.length; i += BATCH) batches.push(JSON.stringify({ batch_id: `bench-${String(i / BATCH).padStart(6, "0")}`, calls: calls.slice(i, i + BATCH) }));
    const requestBytes = batches.reduce((a, b) => a + Buffer.byteLength(b), 0);
    const r2Before = sum(r2Files(persist));
    const d1Before = sum(d1Files(persist));
    const latencies: number[] = [];
    let recorded = 0;
    let resent = 0;
    const tIngest = performance.now();
    await pool(batches, IN_FLIGHT, async (body) => {
      const t0 = performance.now();
      // The gateway resends a batch whose answer it did not get (the batch id makes that idempotent):
      // a connection reset on this busy machine is counted, not fatal.
      const send = async (attempt: number): Promise<Response> => {
        try {
          return await fetch(`${engineUrl}/agent/calls`, { method: "POST", headers: { authorization: `Bearer ${trainerToken}`, "content-type": "application/json" }, body });
        } catch (e) {
          if (attempt >= 3) throw e;
          resent++;
          return send(attempt + 1);
        }
      };
      const res = await send(1);
      const text = await res.text();
      if (res.status !== 200) throw new Error(`POST agent/calls: ${res.status} ${text.slice(0, 300)}`);
      latencies.push(performance.now() - t0);
      // A resent batch that had been stored answers its calls as duplicates: stored all the same.
      const r = JSON.parse(text) as { recorded: number; duplicates: number };
      recorded += r.recorded + r.duplicates;
      if (latencies.length % 40 === 0) log(`${latencies.length}/${batches.length} batches`);
    });
    const ingestSeconds = (performance.now() - tIngest) / 1000;
    if (recorded !== calls.length) throw new Error(`recorded ${recorded} of ${calls.length} calls`);
    const d1AfterCalls = d1Files(persist);
    const r2After = sum(r2Files(persist));
    const batchLatency = summarize(latencies);
    log(`ingest: ${calls.length} calls in ${ingestSeconds.toFixed(1)} s, ${(calls.length / ingestSeconds).toFixed(0)} calls/s; batch p50 ${batchLatency.p50} ms p99 ${batchLatency.p99} ms`);

    // ------------------------------------------------------------ end the claims
    const tEnd = performance.now();
    await pool(claims, 8, async (c, i) => {
      const r = await client.endEpisode({
        client_uuid: c.client_uuid,
        episode_uuid: c.episode_uuid,
        fence: c.fence,
        task_id: "bench-task",
        workflow_output: { reward: (i % 10) / 10, is_success: i % 2 === 0, metadata: { task_id: "bench-task" }, log_metrics: {} },
      });
      if (!r.success) throw new Error(`end ${c.episode_uuid}: refused`);
    });
    const endSeconds = (performance.now() - tEnd) / 1000;
    log(`${CLAIMS} ended in ${endSeconds.toFixed(1)} s`);

    // Wait for the outbox to write every trajectory row to D1: the export's total says how many.
    const exportUrl = `${engineUrl}/trajectories/export?format=jsonl`;
    const auth = { authorization: `Bearer ${trainerToken}` };
    const tWait = performance.now();
    for (let total = 0; ; ) {
      const res = await fetch(exportUrl, { headers: auth });
      total = Number(res.headers.get("x-trajectories-total") ?? 0);
      await res.body?.cancel();
      if (total >= CLAIMS) break;
      if (performance.now() - tWait > 600_000) throw new Error(`only ${total} of ${CLAIMS} trajectories reached D1 in 10 minutes`);
      await sleep(500);
    }
    const outboxSeconds = (performance.now() - tWait) / 1000;
    const d1AfterTrajectories = sum(d1Files(persist));
    log(`every trajectory in D1 ${outboxSeconds.toFixed(1)} s after the last end`);

    // ------------------------------------------------------------ export
    await sleep(1000); // let the last polls' isolates settle before the baseline
    const samples: { t: number; exported: number; rss_mb: number }[] = [];
    let lines = 0;
    let bytes = 0;
    const tExport = performance.now();
    const sample = () => samples.push({ t: round((performance.now() - tExport) / 1000, 2), exported: lines, rss_mb: rssMb(pids) });
    sample();
    const timer = setInterval(sample, 100);
    const res = await fetch(exportUrl, { headers: auth });
    if (res.status !== 200 || res.body === null) throw new Error(`export: ${res.status} ${await res.text()}`);
    const total = Number(res.headers.get("x-trajectories-total"));
    let exportedCalls = 0;
    let tail = "";
    const dec = new TextDecoder();
    const reader = res.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      bytes += value.byteLength;
      const chunk = tail + dec.decode(value, { stream: true });
      const parts = chunk.split("\n");
      tail = parts.pop() ?? "";
      for (const line of parts) {
        // Every line must be a whole trajectory: parsing it is part of reading the export.
        exportedCalls += (JSON.parse(line) as { calls: unknown[] }).calls.length;
        lines++;
      }
    }
    if (tail.trim() !== "") throw new Error("the export ended inside a line");
    const exportSeconds = (performance.now() - tExport) / 1000;
    clearInterval(timer);
    sample();
    if (lines !== CLAIMS || exportedCalls !== calls.length) throw new Error(`export: ${lines} trajectories with ${exportedCalls} calls, expected ${CLAIMS} with ${calls.length}`);
    const rss = samples.map((s) => s.rss_mb);
    const rssStart = rss[0] ?? 0;
    const rssPeak = Math.max(...rss);
    const rssEnd = rss[rss.length - 1] ?? 0;
    const exportMb = bytes / 1e6;
    log(`export: ${lines} trajectories, ${exportMb.toFixed(1)} MB in ${exportSeconds.toFixed(1)} s; workerd RSS ${rssStart} -> peak ${rssPeak} -> ${rssEnd} MB`);

    // ------------------------------------------------------------ storage, exactly, once workerd has closed D1
    await ex.stop();
    stopped = true;
    const d1Main = d1Files(persist).filter((f) => f.path.endsWith(".sqlite"));
    const exact = d1Main.map((f) => {
      try {
        return tableBytes(f.path, "llm_calls");
      } catch {
        return { bytes: 0, rows: 0 }; // a database without the ledger (none here, but Miniflare may keep others)
      }
    }).reduce((a, b) => ({ bytes: a.bytes + b.bytes, rows: a.rows + b.rows }), { bytes: 0, rows: 0 });
    const trajectoryTable = d1Main.map((f) => {
      try {
        return tableBytes(f.path, "trajectories");
      } catch {
        return { bytes: 0, rows: 0 };
      }
    }).reduce((a, b) => ({ bytes: a.bytes + b.bytes, rows: a.rows + b.rows }), { bytes: 0, rows: 0 });

    const n = calls.length;
    const d1PerCallFiles = (sum(d1AfterCalls) - d1Before) / n;
    const d1PerCall = exact.rows === n ? exact.bytes / n : d1PerCallFiles;
    const D1_MAX = 10e9;
    const fit = D1_MAX / d1PerCall;
    const days = (rate: number) => round(fit / rate / 86_400, 0);
    const doc = {
      started_at: startedAt,
      machine: { cpus: cpus().length, load_average_1m: round(loadavg()[0] ?? 0, 2), node: process.version },
      claims: CLAIMS,
      calls_per_claim: CALLS_PER_CLAIM,
      calls: n,
      batch_calls: BATCH,
      batches_in_flight: IN_FLIGHT,
      claims_phase: { register_and_claim_s: round(claimSeconds), end_s: round(endSeconds), ends_per_s: round(CLAIMS / endSeconds), outbox_to_d1_s: round(outboxSeconds) },
      ingest: {
        seconds: round(ingestSeconds, 2),
        calls_per_s: round(n / ingestSeconds, 0),
        batches_per_s: round(batches.length / ingestSeconds, 2),
        request_mb: round(requestBytes / 1e6, 1),
        request_bytes_per_call: round(requestBytes / n, 0),
        batch_latency_ms: batchLatency,
        batches_resent: resent,
      },
      storage: {
        d1_bytes_per_call: round(d1PerCall, 0),
        d1_bytes_per_call_how: exact.rows === n ? "llm_calls table and its indexes (SQLite dbstat) over its rows" : "D1 files (with -wal) after the calls minus before",
        d1_llm_calls_table_bytes: exact.bytes,
        d1_llm_calls_rows: exact.rows,
        d1_files_bytes_per_call: round(d1PerCallFiles, 0),
        d1_files_before: d1Before,
        d1_files_after_calls: sum(d1AfterCalls),
        d1_files_after_trajectories: d1AfterTrajectories,
        d1_trajectories_bytes_per_row: trajectoryTable.rows > 0 ? round(trajectoryTable.bytes / trajectoryTable.rows, 0) : null,
        r2_bytes_per_call: round((r2After - r2Before) / n, 0),
        r2_files_after_calls: r2After,
        capacity_10gb_d1: { calls: Math.round(fit), days_at_1_per_s: days(1), days_at_10_per_s: days(10), days_at_100_per_s: days(100) },
      },
      export: {
        trajectories: lines,
        announced_total: total,
        calls: exportedCalls,
        mb: round(exportMb, 1),
        seconds: round(exportSeconds, 2),
        mb_per_s: round(exportMb / exportSeconds, 2),
        trajectories_per_s: round(lines / exportSeconds, 0),
        calls_per_s: round(exportedCalls / exportSeconds, 0),
        workerd_rss_mb: { start: rssStart, peak: rssPeak, end: rssEnd, peak_minus_start: round(rssPeak - rssStart) },
        samples,
      },
    };
    const { samples: _s, ...exportSummary } = doc.export;
    process.stdout.write(`${JSON.stringify({ ...doc, export: exportSummary }, null, 2)}\n`);
    const out = arg("--out");
    if (out) writeFileSync(out, `${JSON.stringify(doc, null, 2)}\n`);
    const svg = arg("--svg");
    if (svg) writeChart(svg, doc.export);
  } finally {
    if (!stopped) await ex.stop();
    rmSync(base, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  const cause = e instanceof Error && e.cause !== undefined ? `\ncaused by: ${String(e.cause)}` : "";
  process.stderr.write(`bench:ledger failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}${cause}\n`);
  process.exit(1);
});
