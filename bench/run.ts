/**
 * `npm run bench`: the engine against the limit reference, side by side on this machine.
 *
 * Starts the real exchange in memory and the limit reference (bench/targets.ts, served by
 * bench/serve/ the same way), then for each load configuration creates a fresh engine and runs
 * bench/loadgen.ts against each target in turn (bench/rounds.ts); then measures pool-info cost
 * against registered and claimed counts (bench/poolinfo.ts), and compares (bench/compare.ts).
 * Prints the results as JSON and a compact comparison with the targets; writes
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
 *                  not the reference, for telling the engine's own work from its
 *                  commit strategy; the report's settings say which reference ran
 */
import { mkdir, writeFile } from "node:fs/promises";
import { cpus, loadavg, tmpdir } from "node:os";
import { fileURLToPath } from "node:url";
import { renderChart } from "./chart";
import { LOADS, compare, round } from "./compare";
import { parseFlags } from "./flags";
import { measurePoolInfo } from "./poolinfo";
import { profileTarget } from "./profile";
import type { BenchReport, TargetName } from "./report";
import { measureLoad } from "./rounds";
import { quietWaiter, stateInMemory } from "./stats";
import { printSummary } from "./summary";
import { startTarget, type Target } from "./targets";

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

const t0 = performance.now();
const log = (line: string) => process.stderr.write(`[bench ${((performance.now() - t0) / 1000).toFixed(0).padStart(4)}s] ${line}\n`);

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
  const waitForQuiet = quietWaiter(Number(f.get("quiet-wait") ?? 10), log);
  const quiet = async (what: string) => {
    const pct = await waitForQuiet(what);
    if (pct >= 25) log(`machine still busy (${pct}% of a core used by others): running ${what} anyway; see other_cpu_pct`);
  };
  stateInMemory(f.get("tmpdir"));
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
    if (targetFlag !== "reference") targets.push(await startTarget("engine", { referenceGroupCommit, log }));
    if (targetFlag !== "engine") targets.push(await startTarget("reference", { referenceGroupCommit, log }));
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

    for (const load of loads) {
      const measured = await measureLoad(load, targets, { duration, rounds, warmup, fresh, referenceGroupCommit, quiet, log });
      for (const [name, r] of measured) (report.loads[name] ??= []).push(r);
    }

    if (want("poolinfo")) for (const t of targets) report.pool_info[t.name] = await measurePoolInfo(t, POOL_SHAPES[t.name], log);
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

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
