/**
 * `npm run bench:instr`: machine instructions per operation, counted by valgrind's callgrind on
 * the workerd process that serves each target, one request at a time.
 *
 * CPU time on this VM moves by 10-15% between rounds of identical code, so changes of a few
 * percent need tens of rounds to show (BENCHMARKS.md). An instruction count does not depend on
 * what else the machine is doing, so two trees can be compared in single runs. It is a proxy:
 * it leaves out the kernel (about 9% of workerd's CPU under the benchmark's load) and cache
 * effects. What still varies between runs is work whose amount depends on the wall clock: the
 * outbox's D1 flush runs once a second, so under valgrind's slowdown each flush carries fewer
 * rows and its fixed cost weighs more on end_episode than under real load, and differently from
 * run to run (about 5%). Use --reps for a mean and its standard error. valgrind runs workerd
 * some 50 times slower, so after a short warm-up V8 may still run some JavaScript in its baseline
 * tiers; V8 flags in MINIFLARE_WORKERD_V8_FLAGS (e.g. "--invocation-count-for-turbofan=200")
 * tier it up sooner. With those flags the counts here moved by 1-2% (BENCHMARKS.md, session 8).
 *
 * Flags: --target engine|reference|both (both) --against DIR (instead of the reference: the
 *        engine of another checkout, e.g. a git worktree) --ops register,claim,end (all five
 *        operations of bench/profile.ts by default) --n N (300 measured requests per operation)
 *        --warm N (600 first, so V8 has compiled the hot code) --reps N (1) --keep (leave the
 *        callgrind dumps in the temp dir for callgrind_annotate)
 */
import { execFileSync, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { REPO_ROOT } from "../scripts/local/exchange";
import { startBenchEngine } from "./bench-engine";
import { Http, parseFlags } from "./loadgen";
import { operationSteps, type OpTarget } from "./profile";
import { startReference } from "./reference/serve";

const flags = parseFlags(process.argv.slice(2));
const num = (k: string, d: number): number => Number(flags.get(k) ?? d);
const log = (line: string): void => void process.stderr.write(`[bench:instr] ${line}\n`);

type Side = OpTarget & { name: string; stop(): Promise<void> };
type Counts = Record<string, number[]>;

function requireTool(cmd: string): void {
  if (spawnSync(cmd, ["--version"], { stdio: "ignore" }).status !== 0) {
    throw new Error(`${cmd} not found: install valgrind (apt-get install valgrind), which provides callgrind and callgrind_control`);
  }
}

/** The workerd binary Miniflare would run (the package's default export, under its CommonJS wrapper). */
function workerdBinary(): string {
  const m = createRequire(import.meta.url)("workerd") as string | { default: string };
  return typeof m === "string" ? m : m.default;
}

/** Makes Miniflare start workerd under callgrind, dumps going to `dir`. */
function wrapWorkerd(dir: string): void {
  const script = join(dir, "workerd-callgrind.sh");
  writeFileSync(
    script,
    `#!/bin/sh\nexec valgrind --tool=callgrind --smc-check=all-non-file --callgrind-out-file=${dir}/cg.%p.out ${workerdBinary()} "$@"\n`,
  );
  chmodSync(script, 0o755);
  process.env["MINIFLARE_WORKERD_PATH"] = script;
}

/** The valgrind processes started since `before`, found by their dump directory. */
function callgrindPids(dir: string, before: Set<number> = new Set()): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || before.has(pid)) continue;
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(`--callgrind-out-file=${dir}/`)) out.push(pid);
    } catch {
      // The process ended while /proc was read.
    }
  }
  return out;
}

function control(pid: number, ...args: string[]): void {
  execFileSync("callgrind_control", [...args, String(pid)], { stdio: "ignore" });
}

/** Instructions since the last zeroing: dumps the counters and reads the newest dump's total. */
function instructionsSinceZero(dir: string, pid: number): number {
  control(pid, "--dump");
  const dumps = readdirSync(dir)
    .filter((f) => f.startsWith(`cg.${pid}.out.`))
    .sort((a, b) => Number(a.split(".").pop()) - Number(b.split(".").pop()));
  const text = readFileSync(join(dir, dumps[dumps.length - 1]!), "utf8");
  const m = /^(?:summary|totals):\s+(\d+)/m.exec(text);
  if (!m) throw new Error(`no instruction total in ${dumps[dumps.length - 1]}`);
  return Number(m[1]);
}

async function startEngine(name: string, checkout: string): Promise<Side> {
  const engine = await startBenchEngine("instr", checkout);
  return { ...engine, name, floorPath: "/health", rpcPath: "/get_engine_status" };
}

async function startRef(): Promise<Side> {
  const ref = await startReference({ port: 0 });
  return {
    name: "reference",
    origin: ref.url,
    baseUrl: `${ref.url}/e/ref-${randomBytes(3).toString("hex")}`,
    clientToken: "reference-client",
    trainerToken: "reference-trainer",
    floorPath: "/no-such-route",
    rpcPath: "/get_current_batch_rollout_pool_information",
    stop: () => ref.stop(),
  };
}

/** One pass over the operations on a fresh workerd: instructions per request for each measured one. */
async function measure(dir: string, start: () => Promise<Side>, ops: string[] | null, n: number, warm: number): Promise<Record<string, number>> {
  const before = new Set(callgrindPids(dir));
  const side = await start();
  const pid = callgrindPids(dir, before)[0];
  if (pid === undefined) throw new Error("workerd did not start under callgrind");
  const root = new Http(side.origin, 2);
  const http = new Http(side.baseUrl, 2);
  const out: Record<string, number> = {};
  try {
    for (const step of await operationSteps(side, root, http)) {
      const measured = ops === null || ops.some((o) => step.op.startsWith(o));
      for (let i = 0; i < warm; i++) await step.run(i);
      if (measured) control(pid, "--zero");
      for (let i = 0; i < n; i++) await step.run(i);
      if (measured) out[step.op] = Math.round(instructionsSinceZero(dir, pid) / n);
    }
  } finally {
    await root.close();
    await http.close();
    await side.stop();
  }
  return out;
}

const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
const se = (xs: number[]): number => (xs.length > 1 ? Math.sqrt(xs.reduce((s, x) => s + (x - mean(xs)) ** 2, 0) / (xs.length - 1) / xs.length) : NaN);

async function main(): Promise<void> {
  requireTool("valgrind");
  requireTool("callgrind_control");
  const against = flags.get("against");
  const target = flags.get("target") ?? "both";
  const ops = flags.has("ops") ? (flags.get("ops") ?? "").split(",").filter(Boolean) : null;
  const n = num("n", 300);
  const warm = num("warm", 600);
  const reps = num("reps", 1);
  if (existsSync("/dev/shm")) process.env["TMPDIR"] = "/dev/shm"; // as npm run bench: Miniflare's state really in memory
  const dir = mkdtempSync(join(tmpdir(), "rx-instr-"));
  wrapWorkerd(dir);

  const sides: { name: string; start: () => Promise<Side> }[] = [];
  if (target !== "reference") sides.push({ name: "engine", start: () => startEngine("engine", REPO_ROOT) });
  if (against !== undefined) sides.push({ name: "against", start: () => startEngine("against", resolve(against)) });
  else if (target !== "engine") sides.push({ name: "reference", start: startRef });

  const counts = new Map<string, Counts>(sides.map((s) => [s.name, {}]));
  try {
    for (let rep = 0; rep < reps; rep++) {
      // Alternate the order, so neither side always runs first.
      for (const s of rep % 2 === 0 ? sides : [...sides].reverse()) {
        const got = await measure(dir, s.start, ops, n, warm);
        const c = counts.get(s.name)!;
        for (const [op, v] of Object.entries(got)) (c[op] ??= []).push(v);
        log(`rep ${rep + 1}/${reps} ${s.name.padEnd(9)} ${Object.entries(got).map(([op, v]) => `${op} ${(v / 1000).toFixed(1)}k`).join(", ")}`);
      }
    }
  } finally {
    if (flags.has("keep")) log(`callgrind dumps kept in ${dir}`);
    else rmSync(dir, { recursive: true, force: true });
  }

  const report: Record<string, Record<string, { mean: number; se: number | null; runs: number[] }>> = {};
  for (const [name, c] of counts) {
    report[name] = Object.fromEntries(
      Object.entries(c).map(([op, xs]) => [op, { mean: Math.round(mean(xs)), se: Number.isNaN(se(xs)) ? null : Math.round(se(xs)), runs: xs }]),
    );
  }
  const [a, b] = sides.map((s) => report[s.name]!);
  if (a && b) {
    for (const op of Object.keys(a)) {
      const x = a[op]!;
      const y = b[op];
      if (y) log(`${op.padEnd(20)} ${sides[0]!.name} ${(x.mean / 1000).toFixed(1)}k, ${sides[1]!.name} ${(y.mean / 1000).toFixed(1)}k instructions: ratio ${(y.mean / x.mean).toFixed(2)}`);
    }
  }
  process.stdout.write(`${JSON.stringify({ n, warm, reps, against: against ?? null, instructions_per_request: report }, null, 2)}\n`);
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    log(e instanceof Error ? (e.stack ?? e.message) : String(e));
    process.exit(1);
  },
);
