/**
 * `npm run bench`: the engine against the limit reference, side by side on this machine.
 *
 * Starts the real exchange in memory (scripts/local/exchange.ts: the Worker on Miniflare, no
 * proxy) and the limit reference (bench/reference: same Miniflare, same way of serving), then
 * for each load configuration creates a fresh engine and runs bench/loadgen.ts against each
 * target in turn; then measures pool-info cost against registered and claimed counts.
 * Prints the results as JSON and a compact comparison with the issue's targets; writes
 * bench/results/latest.json and latest.svg (and, with --record, bench/recorded.{json,svg},
 * the run BENCHMARKS.md quotes).
 *
 * Flags:
 *   --duration S   measured seconds per load configuration and target (default 24)
 *   --rounds N     split them into N alternating windows, engine and reference taking turns;
 *                  the median round is reported (default 3)
 *   --warmup S     unmeasured seconds before the first round (default 5; 2 before later ones)
 *   --only LIST    comma list of 32x256, 128x256, 32x10000, poolinfo, profile (default all)
 *   --target T     engine | reference | both (default both)
 *   --tmpdir DIR   where Miniflare keeps the state of an unpersisted run. Default /dev/shm
 *                  when it exists: Miniflare's "in-memory" mode still writes SQLite files
 *                  under the OS temp dir and fsyncs every commit, and on tmpfs they really
 *                  are in memory. Both targets get the same; pass --tmpdir /tmp for disk.
 *   --quiet-wait S before each run, wait up to S seconds for the rest of the machine to go
 *                  quiet (< 25% of a core busy; default 10, 0 = never wait)
 *   --fresh        new workerd processes (and engines) for both targets before every round,
 *                  each round with the full warm-up. One pair of processes carries a bias of
 *                  several percent for as long as it lives (bench:ab found identical trees
 *                  0.1-0.2 ms per cycle apart); fresh pairs let it average out over the rounds.
 *   --record       also write bench/recorded.json and bench/recorded.svg
 *   --reference-group-commit  the reference shares commits as the engine does (worker.js):
 *                  not the issue's reference, for telling the engine's own work from its
 *                  commit strategy; the report's settings say which reference ran
 */
import { existsSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import { cpus, loadavg, tmpdir } from "node:os";
import { fileURLToPath } from "node:url";
import { AdminClient } from "../src/client";
import { startLocalExchange } from "../scripts/local/exchange";
import { startReference } from "./reference/serve";
import { Http, parseFlags, prepareEngine, runLoad, type LoadResult } from "./loadgen";
import { claimMore, fillPool, timePoolInfo, type PoolInfoResult } from "./poolinfo";
import { waitQuiet, workerdPids } from "./stats";
import { profileTarget, type OpProfile } from "./profile";
import { renderChart } from "./chart";
import type { BenchReport, Check, Comparison, RoundSummary, Side, TargetName } from "./report";

type Target = {
  name: TargetName;
  origin: string;
  /** A route served by the Worker alone, and one that reaches the Durable Object but runs no SQL. */
  floorPath: string;
  rpcPath: string;
  pids: number[];
  /** A fresh engine for one run: its base URL and the client and trainer tokens. */
  newEngine(tag: string): Promise<{ baseUrl: string; clientToken: string; trainerToken: string }>;
  stop(): Promise<void>;
};

const LOADS = [
  { label: "32x256", clients: 32, episodes: 256 },
  { label: "128x256", clients: 128, episodes: 256 },
  { label: "32x10000", clients: 32, episodes: 10_000 },
] as const;

/** Pool-info shapes: [registered, claimed]. Time should follow claimed, not registered. */
const POOL_SHAPES: Record<TargetName, [number, number][]> = {
  engine: [
    [256, 8],
    [10_000, 8],
    [10_000, 256],
  ],
  // The reference's answer is constant; one shape gives the floor of a pool-info call.
  reference: [[256, 8]],
};

const SEED = { cycles_256: 160, cycles_10k: 55, claim_p50_256_ms: 71, claim_p50_10k_ms: 215, pool_info_10k_ms: 500 };

const t0 = performance.now();
const log = (line: string) => process.stderr.write(`[bench ${((performance.now() - t0) / 1000).toFixed(0).padStart(4)}s] ${line}\n`);

async function startEngineTarget(): Promise<Target> {
  const adminToken = `bench-admin-${randomBytes(12).toString("hex")}`;
  const before = new Set(workerdPids());
  const opts = { port: 0, persistDir: null, adminToken, claimKeySecret: randomBytes(32).toString("hex"), log: (l: string) => log(`  exchange: ${l}`) };
  const ex = await startLocalExchange(opts);
  const pids = workerdPids().filter((p) => !before.has(p));
  const admin = new AdminClient({ origin: ex.url, adminToken });
  return {
    name: "engine",
    origin: ex.url,
    floorPath: "/health",
    rpcPath: "/get_engine_status",
    pids,
    async newEngine(tag) {
      const created = await admin.createEngine(`bench-${tag}-${randomBytes(3).toString("hex")}`);
      return { baseUrl: `${ex.url}/e/${created.engine}`, clientToken: created.tokens.client!, trainerToken: created.tokens.trainer! };
    },
    stop: () => ex.stop(),
  };
}

async function startReferenceTarget(groupCommit: boolean): Promise<Target> {
  const before = new Set(workerdPids());
  const ref = await startReference({ port: 0, log: (l) => log(`  reference: ${l}`), groupCommit });
  const pids = workerdPids().filter((p) => !before.has(p));
  return {
    name: "reference",
    origin: ref.url,
    floorPath: "/no-such-route",
    rpcPath: "/get_current_batch_rollout_pool_information",
    pids,
    async newEngine(tag) {
      return { baseUrl: `${ref.url}/e/ref-${tag}-${randomBytes(3).toString("hex")}`, clientToken: "reference-client", trainerToken: "reference-trainer" };
    },
    stop: () => ref.stop(),
  };
}

/** `referenceGroupCommit`: --reference-group-commit (see the header). */
function startTarget(name: TargetName, referenceGroupCommit: boolean): Promise<Target> {
  return name === "engine" ? startEngineTarget() : startReferenceTarget(referenceGroupCommit);
}

/** The round with the median cycles/s (the lower middle one for an even count); errors and retries summed over all rounds. */
function medianRound(results: LoadResult[]): LoadResult {
  const sorted = [...results].sort((a, b) => a.cycles_per_s - b.cycles_per_s);
  const mid = sorted[Math.floor((sorted.length - 1) / 2)]!;
  return {
    ...mid,
    retries: results.reduce((a, r) => a + r.retries, 0),
    errors: results.reduce((a, r) => a + r.errors, 0),
    error_samples: results.flatMap((r) => r.error_samples).slice(0, 5),
  };
}

function side<T extends TargetName>(t: T, r: LoadResult): Side<T> {
  return {
    [`${t}_cycles_per_s`]: r.cycles_per_s,
    [`${t}_claim_p50_ms`]: r.claim_ms.p50,
    [`${t}_end_p50_ms`]: r.end_ms.p50,
    [`${t}_cpu_ms_per_cycle`]: r.server_cpu_ms_per_cycle,
    [`${t}_errors`]: r.errors,
    [`${t}_other_cpu_pct`]: r.other_cpu_pct,
  } as Side<T>;
}

function compare(report: Omit<BenchReport, "comparison">): Comparison {
  const find = (t: TargetName, label: string) => report.loads[t]?.find((r) => r.label === label);
  const per_load = LOADS.map(({ label }) => {
    const e = find("engine", label);
    const r = find("reference", label);
    return {
      label,
      ...(e ? side("engine", e) : {}),
      ...(r ? side("reference", r) : {}),
      ...(e && r && r.cycles_per_s > 0 ? { ratio: round(e.cycles_per_s / r.cycles_per_s, 2) } : {}),
      ...(e?.server_cpu_ms_per_cycle && r?.server_cpu_ms_per_cycle ? { cpu_ratio: round(e.server_cpu_ms_per_cycle / r.server_cpu_ms_per_cycle, 2) } : {}),
    };
  }).filter((p) => p.engine_cycles_per_s !== undefined || p.reference_cycles_per_s !== undefined);

  const claim_p50_10k_over_256: Partial<Record<TargetName, number>> = {};
  for (const t of ["engine", "reference"] as const) {
    const a = find(t, "32x256");
    const b = find(t, "32x10000");
    if (a && b && a.claim_ms.p50 > 0) claim_p50_10k_over_256[t] = round(b.claim_ms.p50 / a.claim_ms.p50, 2);
  }

  const checks: Check[] = [];
  for (const p of per_load) {
    if (p.ratio !== undefined) checks.push({ target: `${p.label}: engine >= 0.8x reference cycles/s`, value: `${p.ratio}x`, met: p.ratio >= 0.8 });
  }
  const q = claim_p50_10k_over_256.engine;
  if (q !== undefined) checks.push({ target: "engine claim p50 at 10,000 <= 1.5x p50 at 256 (32 clients)", value: `${q}x`, met: q <= 1.5 });
  const pi = report.pool_info.engine;
  const at = (r: number, c: number) => pi?.find((x) => x.registered === r && x.claimed === c);
  const small = at(256, 8);
  const big = at(10_000, 8);
  const bigClaimed = at(10_000, 256);
  if (small && big) {
    const k = round(big.ms.p50 / small.ms.p50, 2);
    checks.push({
      target: "pool info O(claimed): p50 with 10,000 registered <= 1.5x p50 with 256 (8 claimed each)",
      value: `${small.ms.p50} ms -> ${big.ms.p50} ms (${k}x)${bigClaimed ? `; 256 claimed: ${bigClaimed.ms.p50} ms` : ""}`,
      met: k <= 1.5,
    });
  }
  const e256 = find("engine", "32x256");
  const e10k = find("engine", "32x10000");
  if (e256) checks.push({ target: `beat the seed 2x at 256 (>= ${2 * SEED.cycles_256} cycles/s, 32 clients)`, value: `${e256.cycles_per_s}/s (${round(e256.cycles_per_s / SEED.cycles_256, 2)}x seed)`, met: e256.cycles_per_s >= 2 * SEED.cycles_256 });
  const e128 = find("engine", "128x256");
  if (e128) checks.push({ target: `beat the seed 2x at 256 (>= ${2 * SEED.cycles_256} cycles/s, 128 clients)`, value: `${e128.cycles_per_s}/s (${round(e128.cycles_per_s / SEED.cycles_256, 2)}x seed)`, met: e128.cycles_per_s >= 2 * SEED.cycles_256 });
  if (e10k) checks.push({ target: `beat the seed 5x at 10,000 (>= ${5 * SEED.cycles_10k} cycles/s)`, value: `${e10k.cycles_per_s}/s (${round(e10k.cycles_per_s / SEED.cycles_10k, 2)}x seed)`, met: e10k.cycles_per_s >= 5 * SEED.cycles_10k });
  return { per_load, claim_p50_10k_over_256, checks };
}

const round = (x: number, d: number) => Math.round(x * 10 ** d) / 10 ** d;

function printSummary(r: BenchReport): void {
  const lines: string[] = ["", "cycles/s and claim p50 (engine vs limit reference):"];
  const cols = ["load", "engine", "reference", "ratio", "claim p50 eng", "claim p50 ref", "CPU/cycle eng", "CPU/cycle ref", "errors", "others' CPU"];
  const widths = [9, 7, 9, 6, 13, 13, 13, 13, 7, 11];
  const row = (cells: string[]) => "  " + cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(" ");
  lines.push(row(cols));
  for (const p of r.comparison.per_load) {
    const f = (x: number | null | undefined, suffix = "") => (x === undefined || x === null ? "-" : `${x}${suffix}`);
    lines.push(
      row([
        p.label,
        f(p.engine_cycles_per_s),
        f(p.reference_cycles_per_s),
        f(p.ratio, "x"),
        f(p.engine_claim_p50_ms, " ms"),
        f(p.reference_claim_p50_ms, " ms"),
        f(p.engine_cpu_ms_per_cycle, " ms"),
        f(p.reference_cpu_ms_per_cycle, " ms"),
        `${f(p.engine_errors)}/${f(p.reference_errors)}`,
        `${f(p.engine_other_cpu_pct, "%")}/${f(p.reference_other_cpu_pct, "%")}`,
      ]),
    );
  }
  lines.push("  (cycles/s; CPU/cycle = workerd CPU per cycle; others' CPU = the rest of the machine during each run, % of a core)");
  const q = r.comparison.claim_p50_10k_over_256;
  lines.push(`  claim p50 at 10,000 / at 256: engine ${q.engine ?? "-"}x, reference ${q.reference ?? "-"}x`);
  if (r.pool_info.engine?.length) {
    lines.push("pool info (engine), p50 per call:");
    for (const p of r.pool_info.engine) lines.push(`  ${String(p.registered).padStart(6)} registered, ${String(p.claimed).padStart(4)} claimed: ${p.ms.p50} ms (p99 ${p.ms.p99} ms, ${p.bytes} bytes)`);
  }
  for (const l of r.loads.engine ?? []) {
    lines.push(`  after ${l.label}: ${l.pool_info_after.finished_rows} finished episodes, pool info ${l.pool_info_after.ms.p50} ms (${l.pool_info_after.bytes} bytes)`);
  }
  const pe = r.profile.engine;
  const pr = r.profile.reference;
  if (pe?.length || pr?.length) {
    lines.push("one request at a time: p50 latency / workerd CPU per request (engine | reference):");
    for (const op of (pe ?? pr)!.map((p) => p.op)) {
      const f = (p: OpProfile | undefined) => (p ? `${p.ms.p50} ms / ${p.server_cpu_ms_per_req} ms` : "-");
      lines.push(`  ${op.padEnd(20)} ${f(pe?.find((p) => p.op === op)).padStart(20)} | ${f(pr?.find((p) => p.op === op))}`);
    }
  }
  lines.push("targets:");
  for (const c of r.comparison.checks) lines.push(`  [${c.met === null ? "?" : c.met ? "met" : "MISSED"}] ${c.target}: ${c.value}`);
  process.stderr.write(lines.join("\n") + "\n");
}

async function main(): Promise<void> {
  const f = parseFlags(process.argv.slice(2));
  const duration = Number(f.get("duration") ?? 24);
  const warmup = Number(f.get("warmup") ?? 5);
  const rounds = Math.max(1, Math.floor(Number(f.get("rounds") ?? 3)));
  const only = f.get("only")?.split(",").map((s) => s.trim());
  const want = (name: string) => !only || only.includes(name);
  const targetFlag = f.get("target") ?? "both";
  if (!["engine", "reference", "both"].includes(targetFlag)) throw new Error(`--target must be engine, reference or both`);
  const fresh = f.has("fresh");
  const referenceGroupCommit = f.has("reference-group-commit");
  const quietWaitS = Number(f.get("quiet-wait") ?? 10);
  const quiet = async (what: string) => {
    if (quietWaitS <= 0) return;
    const pct = await waitQuiet(25, quietWaitS * 1000, (p) => log(`waiting for the machine to go quiet before ${what} (others use ${p}% of a core)`));
    if (pct >= 25) log(`machine still busy (${pct}% of a core used by others): running ${what} anyway; see other_cpu_pct`);
  };
  const tmp = f.get("tmpdir") ?? (existsSync("/dev/shm") ? "/dev/shm" : undefined);
  if (tmp) process.env["TMPDIR"] = tmp; // Miniflare puts its unpersisted state under os.tmpdir()
  const loads = LOADS.filter((l) => want(l.label));
  if (only) for (const o of only) if (o !== "poolinfo" && o !== "profile" && !LOADS.some((l) => l.label === o)) throw new Error(`unknown --only entry ${o}: use ${LOADS.map((l) => l.label).join(", ")}, poolinfo`);

  const report: Omit<BenchReport, "comparison"> = {
    started_at: new Date().toISOString(),
    machine: { cores: cpus().length, cpu: cpus()[0]?.model ?? "unknown", node: process.version, loadavg_at_start: loadavg().map((x) => round(x, 2)) },
    settings: { duration_s: duration, rounds, warmup_s: warmup, state_dir: tmpdir(), fresh_processes_per_round: fresh, reference_group_commit: referenceGroupCommit },
    loads: {},
    pool_info: {},
    profile: {},
  };
  const est = loads.length * (duration + warmup + (fresh ? warmup + 8 : 2) * (rounds - 1) + 5) * (targetFlag === "both" ? 2 : 1);
  log(`${loads.length} load configuration(s) x ${targetFlag}, ${warmup} s warm-up + ${rounds} x ${round(duration / rounds, 1)} s each (about ${Math.round(est / 60)} min of load)${want("poolinfo") ? " + pool info" : ""}`);

  const targets: Target[] = [];
  try {
    if (targetFlag !== "reference") targets.push(await startTarget("engine", referenceGroupCommit));
    if (targetFlag !== "engine") targets.push(await startTarget("reference", referenceGroupCommit));
    for (const t of targets) log(`${t.name}: ${t.origin}, workerd pid(s) ${t.pids.join(",") || "?"}`);

    if (want("profile")) {
      for (const t of targets) {
        await quiet(`${t.name} profile`);
        log(`${t.name} profile: each operation alone, one request at a time`);
        const eng = await t.newEngine("profile");
        const ops = await profileTarget({ ...eng, origin: t.origin, floorPath: t.floorPath, rpcPath: t.rpcPath, pids: t.pids });
        for (const p of ops) log(`  ${p.op.padEnd(20)} p50 ${p.ms.p50} ms, workerd ${p.server_cpu_ms_per_req} ms CPU/request (other ${p.other_cpu_pct}%)`);
        report.profile[t.name] = ops;
      }
    }

    // Interleaved, so a slow phase of a busy machine hits both targets alike.
    for (const load of loads) {
      // One engine per target for this configuration, filled once; then `rounds` measured
      // windows per target, alternating targets (E R, R E, ...) so a busy phase of the machine
      // hits both alike. The round with the median cycles/s stands for the target.
      const engines = new Map<TargetName, Awaited<ReturnType<Target["newEngine"]>>>();
      const prepare = async (t: Target): Promise<void> => {
        const eng = await t.newEngine(load.label);
        log(`${t.name} ${load.label}: registering ${load.episodes}`);
        const http = new Http(eng.baseUrl, 40);
        await prepareEngine(http, eng.trainerToken, load.episodes, log).finally(() => http.close());
        engines.set(t.name, eng);
      };
      for (const t of targets) await prepare(t);
      const perRound = round(duration / rounds, 1);
      const got = new Map<TargetName, LoadResult[]>();
      /** Episodes ended on each target's current engine (fresh engines start from none). */
      const ended = new Map<TargetName, number>();
      for (let i = 0; i < rounds; i++) {
        if (fresh && i > 0) {
          for (let k = 0; k < targets.length; k++) {
            const old = targets[k]!;
            await old.stop();
            const t = await startTarget(old.name, referenceGroupCommit);
            log(`${t.name}: fresh processes for round ${i + 1}, ${t.origin}, workerd pid(s) ${t.pids.join(",") || "?"}`);
            targets[k] = t;
            await prepare(t);
            ended.set(t.name, 0);
          }
        }
        for (const t of i % 2 === 0 ? targets : [...targets].reverse()) {
          const eng = engines.get(t.name)!;
          const w = i === 0 || fresh ? warmup : Math.min(warmup, 2);
          log(`${t.name} ${load.label} round ${i + 1}/${rounds}: ${load.clients} clients for ${w}+${perRound} s`);
          const res = await runLoad({
            ...eng,
            clients: load.clients,
            episodes: load.episodes,
            durationSec: perRound,
            warmupSec: w,
            setup: false,
            label: load.label,
            serverPids: t.pids,
            log,
            beforeLoad: () => quiet(`${t.name} ${load.label}`),
          });
          log(
            `${t.name} ${load.label} round ${i + 1}: ${res.cycles_per_s} cycles/s, claim p50 ${res.claim_ms.p50} ms p99 ${res.claim_ms.p99} ms, end p50 ${res.end_ms.p50} ms, ` +
              `retries ${res.retries}, errors ${res.errors}, CPU % of a core: bench ${res.loadgen_cpu_pct}, workerd ${res.server_cpu_pct} (${res.server_cpu_ms_per_cycle} ms/cycle), others ${res.other_cpu_pct}`,
          );
          for (const e of res.error_samples) log(`  error: ${e}`);
          got.set(t.name, [...(got.get(t.name) ?? []), res]);
          ended.set(t.name, (ended.get(t.name) ?? 0) + res.ended_total);
        }
      }
      for (const t of targets) {
        const results = got.get(t.name)!;
        const eng = engines.get(t.name)!;
        const http = new Http(eng.baseUrl, 2);
        const after = await timePoolInfo(http, eng.trainerToken, load.episodes, 0, 10).finally(() => http.close());
        (report.loads[t.name] ??= []).push({
          ...medianRound(results),
          rounds: results.map((r) => ({ cycles_per_s: r.cycles_per_s, claim_p50_ms: r.claim_ms.p50, end_p50_ms: r.end_ms.p50, server_cpu_ms_per_cycle: r.server_cpu_ms_per_cycle, errors: r.errors, other_cpu_pct: r.other_cpu_pct })),
          pool_info_after: { finished_rows: ended.get(t.name) ?? 0, ms: after.ms, bytes: after.bytes },
        });
      }
    }

    if (want("poolinfo")) {
      for (const t of targets) {
        const results: PoolInfoResult[] = [];
        for (const [registered, claimed] of POOL_SHAPES[t.name]) {
          // Shapes with the same registered count share an engine: claim more on the same pool.
          const prev = results.at(-1);
          const reuse = prev && prev.registered === registered && prev.claimed <= claimed;
          const key = `${t.name}-${registered}`;
          const state = (reuse ? poolEngines.get(key) : undefined) ?? (await t.newEngine(`pool${registered}`));
          poolEngines.set(key, state);
          const http = new Http(state.baseUrl, 20);
          try {
            if (reuse && prev) await claimMore(http, state.clientToken, claimed - prev.claimed);
            else {
              log(`${t.name} pool info: registering ${registered}, claiming ${claimed}`);
              await fillPool(http, state.clientToken, state.trainerToken, registered, claimed, log);
            }
            const r = await timePoolInfo(http, state.trainerToken, registered, claimed);
            log(`${t.name} pool info with ${registered} registered, ${claimed} claimed: p50 ${r.ms.p50} ms, p99 ${r.ms.p99} ms, ${r.bytes} bytes`);
            results.push(r);
          } finally {
            await http.close();
          }
        }
        report.pool_info[t.name] = results;
      }
    }
  } finally {
    for (const t of targets) await t.stop().catch((e: unknown) => log(`stopping ${t.name}: ${String(e)}`));
  }

  const full: BenchReport = { ...report, comparison: compare(report) };
  const json = JSON.stringify(full, null, 2);
  const svg = renderChart(full);
  const dir = fileURLToPath(new URL("./results/", import.meta.url));
  await mkdir(dir, { recursive: true });
  await writeFile(`${dir}latest.json`, json + "\n");
  await writeFile(`${dir}latest.svg`, svg);
  if (f.has("record")) {
    await writeFile(fileURLToPath(new URL("./recorded.json", import.meta.url)), json + "\n");
    await writeFile(fileURLToPath(new URL("./recorded.svg", import.meta.url)), svg);
  }
  console.log(json);
  printSummary(full);
  log(`done; results in bench/results/latest.json and latest.svg${f.has("record") ? ", recorded in bench/recorded.{json,svg}" : ""}`);
}

const poolEngines = new Map<string, { baseUrl: string; clientToken: string; trainerToken: string }>();

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
