/**
 * `npm run bench:perf`: where workerd's CPU goes per benchmark cycle, by category (SQLite,
 * JavaScript, GC, RPC, HTTP, ...), for the engine and for the limit reference under the load
 * `npm run bench` uses, so the categories where the engine spends more than the reference show.
 *
 * Each target runs in its own workerd with V8's --perf-basic-prof (V8 then writes
 * /tmp/perf-<pid>.map, which names JIT code for perf). Over the load's measuring window
 * `perf record -e cpu-clock -g` samples that workerd (the VM has no PMU; cpu-clock is an
 * hrtimer, so one sample is 1/F s of CPU); `perf script` gives the call stacks, and
 * bench/perf-categories.ts sorts each stack into a category (the rules are described there).
 * Besides the categories: for SQLite, which JavaScript function issued the SQL, and for
 * JavaScript, the top functions by self time. All in microseconds of workerd CPU per cycle.
 * perf's own overhead (a few percent at 2 kHz) is in the figures, the same for both targets.
 *
 * JIT names are resolved here rather than by perf: V8 reuses code space, so the map holds
 * several functions at some addresses, and perf picks one arbitrarily; here the latest one
 * written before the window ended wins (jit_frames_reused_pct says how many frames had a choice).
 * Inlined functions count as the function they were inlined into. Functions are named as V8
 * names them, "name script:line:column"; index.js is the Worker as wrangler bundles it
 * (`npx wrangler deploy --dry-run --outdir DIR` writes the same file, to look a line up).
 *
 * --counts: instead of sampling, uprobes on SQLite in the workerd binary, counted by
 * `perf stat` over the window: commits (sqlite3PagerCommitPhaseOne), WAL frames written
 * (walIndexAppend) and statement steps (sqlite3_step, one per statement here) per cycle.
 * Exact, whatever the machine's speed; the probes slow workerd, so cycles/s is lower then.
 *
 * Flags: --target engine|reference|both (both) --clients N (32) --episodes N (256)
 *        --warmup S (8) --duration S (20) --freq HZ (2000) --top N (15) --counts
 *        --keep (leave perf.data and the JIT maps in a temp dir, for `perf report -i`)
 *        --reference-group-commit (the reference shares commits as the engine does: see
 *        bench/reference/worker.js)
 * Prints JSON to stdout and a side-by-side table to stderr. Needs root (or a permissive
 * perf_event_paranoid) and, for --counts, tracefs (mounted here if it is not).
 */
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { REPO_ROOT } from "../scripts/local/exchange";
import { parseFlags } from "./flags";
import { Http } from "./load/http";
import { prepareEngine, runLoad, type LoadResult } from "./loadgen";
import { CATEGORIES, categorize, isJitFrame, isKernelFrame, jsFunction, sqliteCaller, type Category, type Frame } from "./perf-categories";
import { serveEngine } from "./serve/exchange";
import { serveReference } from "./serve/reference";

const flags = parseFlags(process.argv.slice(2));
const num = (k: string, d: number): number => Number(flags.get(k) ?? d);
const log = (line: string): void => void process.stderr.write(`[bench:perf] ${line}\n`);

type TargetName = "engine" | "reference";
type Target = { name: TargetName; baseUrl: string; clientToken: string; trainerToken: string; pids: number[]; stop(): Promise<void> };

/** Both served as bench/run.ts serves them (bench/serve/), each in a workerd of its own. */
async function startTarget(name: TargetName): Promise<Target> {
  if (name === "engine") return { ...(await serveEngine({ prefix: "perf" })), name };
  const ref = await serveReference({ port: 0, log: (l) => log(`  reference: ${l}`), groupCommit: flags.has("reference-group-commit") });
  return { name, ...ref.newEngine("ref-perf"), pids: ref.pids, stop: ref.stop };
}

/** The perf processes running now (a perf stat holds the probes it counts until it ends). */
const running = new Set<number>();

/** Runs perf; resolves with its stderr, rejects when it fails. */
function perf(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn("perf", args, { stdio: ["ignore", "ignore", "pipe"] });
    if (p.pid !== undefined) running.add(p.pid);
    let err = "";
    p.stderr.on("data", (d: Buffer) => (err += d.toString()));
    p.on("error", reject);
    p.on("exit", (code) => {
      running.delete(p.pid!);
      if (code === 0) resolve(err);
      else reject(new Error(`perf ${args[0]} exited ${code}: ${err.trim().slice(-500)}`));
    });
  });
}

/**
 * The load of `npm run bench` on a prepared engine, with `measure` started as the warm-up ends
 * and given the window's length. runLoad starts its clock right after beforeLoad returns, so a
 * timer set there fires within a millisecond of the window's start.
 */
async function underLoad<T>(t: Target, measure: (seconds: number) => Promise<T>): Promise<{ load: LoadResult; measured: T }> {
  const [clients, episodes, warmupSec, durationSec] = [num("clients", 32), num("episodes", 256), num("warmup", 8), num("duration", 20)];
  const http = new Http(t.baseUrl, 40);
  await prepareEngine(http, t.trainerToken, episodes).finally(() => http.close());
  let job: Promise<T> | undefined;
  let timer: NodeJS.Timeout | undefined;
  const start = () => {
    job = measure(durationSec);
    job.catch(() => {}); // awaited below, once the load is over; until then a failure must not end the process
  };
  const beforeLoad = async (): Promise<void> => void (timer = setTimeout(start, warmupSec * 1000));
  const load = await runLoad({ ...t, clients, episodes, warmupSec, durationSec, setup: false, serverPids: t.pids, beforeLoad }).finally(() => clearTimeout(timer));
  if (job === undefined) throw new Error("the load ended before its measuring window");
  const measured = await job;
  log(`${t.name}: ${load.cycles_per_s} cycles/s, workerd ${load.server_cpu_ms_per_cycle} ms CPU per cycle (/proc), others ${load.other_cpu_pct}% of a core, errors ${load.errors}`);
  if (load.errors > 0) log(`  warning: ${load.errors} errors, e.g. ${load.error_samples[0] ?? "?"}`);
  return { load, measured };
}

/** V8's perf maps, read as far as they were written when the window ended; the latest entry at an address wins. */
class JitMaps {
  private readonly maps = new Map<string, { starts: number[]; ends: number[]; names: string[]; order: number[]; maxLen: number }>();
  private readonly cache = new Map<string, { name: string; reused: boolean }>();
  constructor(private readonly lengths: Map<string, number>) {}
  resolve(dso: string, ip: number): { name: string; reused: boolean } | undefined {
    const key = `${dso}@${ip}`;
    const hit = this.cache.get(key);
    if (hit) return hit;
    const m = this.load(dso);
    let lo = 0;
    let hi = m.starts.length; // the first start > ip
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (m.starts[mid]! <= ip) lo = mid + 1;
      else hi = mid;
    }
    let best = -1;
    const names = new Set<string>();
    for (let i = lo - 1; i >= 0 && m.starts[i]! > ip - m.maxLen; i--) {
      if (ip >= m.ends[i]!) continue;
      names.add(m.names[i]!.replace(/^JS:[~^+*]?'?/, ""));
      if (best < 0 || m.order[i]! > m.order[best]!) best = i;
    }
    if (best < 0) return undefined;
    const r = { name: m.names[best]!, reused: names.size > 1 };
    this.cache.set(key, r);
    return r;
  }
  private load(dso: string) {
    let m = this.maps.get(dso);
    if (m) return m;
    const text = existsSync(dso) ? readFileSync(dso).subarray(0, this.lengths.get(dso) ?? Infinity).toString("utf8") : "";
    const rows = text
      .split("\n")
      .map((line, order) => {
        const [start = "", size = "", ...name] = line.split(" ");
        return { start: parseInt(start, 16), size: parseInt(size, 16), name: name.join(" "), order };
      })
      .filter((r) => Number.isFinite(r.start) && Number.isFinite(r.size))
      .sort((a, b) => a.start - b.start);
    m = { starts: rows.map((r) => r.start), ends: rows.map((r) => r.start + r.size), names: rows.map((r) => r.name), order: rows.map((r) => r.order), maxLen: rows.reduce((a, r) => Math.max(a, r.size), 1) };
    this.maps.set(dso, m);
    return m;
  }
}

type Profile = { samples: number; byCategory: Map<Category, number>; sqliteCallers: Map<string, number>; jsFunctions: Map<string, number>; jitFrames: number; jitReused: number };

/** Streams `perf script`'s stacks (a header line, then one frame a line, leaf first) through the categories. */
async function readProfile(data: string, jit: JitMaps): Promise<Profile> {
  const p: Profile = { samples: 0, byCategory: new Map(), sqliteCallers: new Map(), jsFunctions: new Map(), jitFrames: 0, jitReused: 0 };
  const add = (m: Map<string, number>, k: string) => m.set(k, (m.get(k) ?? 0) + 1);
  const child = spawn("perf", ["script", "-i", data, "-F", "comm,pid,tid,ip,sym,dso"], { stdio: ["ignore", "pipe", "ignore"] });
  const exited = new Promise<number | null>((resolve, reject) => {
    child.on("error", reject);
    child.on("exit", resolve);
  });
  let stack: Frame[] | null = null;
  let map = ""; // the perf map of the sample's process
  const flush = () => {
    if (stack === null) return;
    p.samples++;
    const { category, at } = categorize(stack);
    add(p.byCategory, category);
    if (category === "sqlite") add(p.sqliteCallers, sqliteCaller(stack, at));
    if (category === "js" || category === "d1_simulator") add(p.jsFunctions, jsFunction(stack, at));
    stack = null;
  };
  for await (const line of createInterface({ input: child.stdout, crlfDelay: Infinity })) {
    if (line.trim() === "") continue;
    if (!/^\s/.test(line)) {
      // "workerd  3342/3350  ": comm pid/tid
      flush();
      stack = [];
      map = `/tmp/perf-${/\s(\d+)\/\d+\s*$/.exec(line)?.[1] ?? "?"}.map`;
      continue;
    }
    // "    55e1cf7c784c JS:^fetch entry.worker.js:99:14 (/tmp/perf-3342.map)": the dso is the last parenthesis.
    const m = /^\s*([0-9a-f]+)\s+(.*?)\s+\(([^()]*)\)$/.exec(line);
    if (!m || stack === null) continue;
    const f: Frame = { ip: BigInt(`0x${m[1]}`), sym: m[2]!, dso: m[3]! };
    // Some of V8's code pages are unknown to perf (made executable after perf attached, it
    // seems), and their frames come as [unknown]: try the map for those too.
    const unknown = f.dso === "[unknown]" && !isKernelFrame(f);
    if (isJitFrame(f) || unknown) {
      const r = jit.resolve(unknown ? map : f.dso, Number(f.ip));
      if (r) {
        p.jitFrames++;
        if (r.reused) p.jitReused++;
        f.sym = r.name;
        if (unknown) f.dso = map;
      }
    }
    stack.push(f);
  }
  flush();
  const code = await exited;
  if (code !== 0) throw new Error(`perf script exited ${code}`);
  return p;
}

const r1 = (x: number): number => Math.round(x * 10) / 10;

/** The `top` largest entries as µs per cycle. */
function topUs(m: Map<string, number>, usPerSample: number, top: number): Record<string, number> {
  return Object.fromEntries([...m].sort((a, b) => b[1] - a[1]).slice(0, top).map(([k, n]) => [k, r1(n * usPerSample)]));
}

async function sampleTarget(t: Target, dir: string) {
  const freq = num("freq", 2000);
  const data = join(dir, `${t.name}.perf.data`);
  const maps = t.pids.map((p) => `/tmp/perf-${p}.map`);
  const mapLengths = new Map<string, number>();
  let load: LoadResult;
  let p: Profile;
  try {
    ({ load } = await underLoad(t, async (seconds) => {
      log(`${t.name}: perf record over ${seconds} s`);
      const err = await perf(["record", "-e", "cpu-clock", "-F", String(freq), "-g", "-p", t.pids.join(","), "-o", data, "--", "sleep", String(seconds)]);
      for (const m of maps) if (existsSync(m)) mapLengths.set(m, statSync(m).size);
      const lost = /lost\s+(\d+)/i.exec(err);
      if (lost) log(`  warning: perf lost ${lost[1]} chunks of samples`);
    }).finally(() => t.stop()));
    if (mapLengths.size === 0) log(`  warning: no /tmp/perf-<pid>.map: JIT frames have no names (did workerd get --perf-basic-prof?)`);
    log(`${t.name}: reading the stacks`);
    p = await readProfile(data, new JitMaps(mapLengths));
  } finally {
    if (!flags.has("keep")) for (const f of [data, ...maps]) rmSync(f, { force: true });
  }
  // perf ran `sleep duration` from the start of runLoad's window, which is as long, so the
  // window's cycles are the cycles perf saw (give or take perf's start-up, some milliseconds).
  const cycles = load.cycles;
  if (cycles === 0) throw new Error(`${t.name}: no cycles in the window`);
  const usPerSample = 1e6 / freq / cycles;
  const top = num("top", 15);
  return {
    cycles,
    cycles_per_s: load.cycles_per_s,
    samples: p.samples,
    /** workerd's CPU per cycle from /proc over the same window: a check on the sampled total. */
    proc_cpu_us_per_cycle: load.server_cpu_ms_per_cycle === null ? null : r1(load.server_cpu_ms_per_cycle * 1000),
    cpu_us_per_cycle: {
      total: r1(p.samples * usPerSample),
      ...Object.fromEntries(CATEGORIES.map((c) => [c, r1((p.byCategory.get(c) ?? 0) * usPerSample)])),
    } as Record<"total" | Category, number>,
    sqlite_by_js_caller_us: topUs(p.sqliteCallers, usPerSample, top),
    js_top_functions_us: topUs(p.jsFunctions, usPerSample, top),
    jit_frames_reused_pct: p.jitFrames === 0 ? 0 : r1((100 * p.jitReused) / p.jitFrames),
    other_cpu_pct: load.other_cpu_pct,
    errors: load.errors,
  };
}

const PROBES = [
  ["commits", "sqlite3PagerCommitPhaseOne"],
  ["wal_frames", "walIndexAppend"],
  ["statements", "sqlite3_step"],
] as const;

/** The binary itself, not the package's link to it: uprobes go on the file. */
function workerdBinary(): string {
  const link = join(REPO_ROOT, "node_modules", "@cloudflare", "workerd-linux-64", "bin", "workerd");
  if (!existsSync(link)) throw new Error(`no workerd binary at ${link}`);
  return realpathSync(link);
}

/**
 * Adds the uprobes; returns those that exist, and a synchronous `cleanup` that removes them (and
 * tracefs, if mounted here: perf probe needs it), also on Ctrl-C, since probes left behind would
 * slow every later run of workerd.
 */
async function addProbes(): Promise<{ probes: (typeof PROBES)[number][]; cleanup: () => void }> {
  let mounted = false;
  if (!existsSync("/sys/kernel/tracing/uprobe_events") && !existsSync("/sys/kernel/debug/tracing/uprobe_events")) {
    if (spawnSync("mount", ["-t", "tracefs", "nodev", "/sys/kernel/tracing"]).status !== 0) throw new Error("--counts: no tracefs, and mounting it on /sys/kernel/tracing failed");
    mounted = true;
    log("mounted tracefs on /sys/kernel/tracing");
  }
  const probes: (typeof PROBES)[number][] = [];
  let done = false;
  const cleanup = () => {
    if (done) return;
    done = true;
    // A running perf stat holds the probes. It ends (cleanly) when its `sleep` does; it ignores
    // SIGINT while that runs. The event loop is stopped in here, so an ended perf stays a zombie.
    const read = (f: string) => {
      try {
        return readFileSync(f, "utf8");
      } catch {
        return ""; // gone
      }
    };
    const alive = (pid: number) => /\) [^Z] /.test(read(`/proc/${pid}/stat`));
    for (const pid of running) for (const child of read(`/proc/${pid}/task/${pid}/children`).split(" ").filter(Boolean)) process.kill(Number(child), "SIGTERM");
    for (let i = 0; i < 60 && [...running].some(alive); i++) spawnSync("sleep", ["0.05"]);
    for (const p of probes) {
      const r = spawnSync("perf", ["probe", "-d", `probe_workerd:${p[1]}`], { encoding: "utf8" });
      if (r.status !== 0) log(`  could not remove probe_workerd:${p[1]}: ${r.stderr.trim()}`);
    }
    if (mounted) {
      const u = spawnSync("umount", ["/sys/kernel/tracing"], { encoding: "utf8" });
      if (u.status !== 0) log(`  could not unmount tracefs: ${u.stderr.trim()}`);
    }
  };
  // First in line, and ending the process itself: a handler of Miniflare's (signal-exit) exits
  // on SIGINT before later listeners run. process.exit still runs Miniflare's exit hooks.
  for (const sig of ["SIGINT", "SIGTERM"] as const) {
    process.prependListener(sig, () => {
      cleanup();
      process.exit(sig === "SIGINT" ? 130 : 143);
    });
  }
  const bin = workerdBinary();
  for (const p of PROBES) {
    try {
      await perf(["probe", "-x", bin, "-a", p[1]]);
      probes.push(p);
    } catch (e) {
      if (String(e).includes("already exists")) probes.push(p);
      else log(`  no probe on ${p[1]}, skipped: ${String(e).split("\n")[0]}`);
    }
  }
  return { probes, cleanup };
}

async function countTarget(t: Target, probes: (typeof PROBES)[number][]) {
  const { load, measured } = await underLoad(t, async (seconds) => {
    log(`${t.name}: perf stat over ${seconds} s`);
    const events = probes.map((p) => `probe_workerd:${p[1]}`);
    const err = await perf(["stat", "-x,", ...events.flatMap((e) => ["-e", e]), "-p", t.pids.join(","), "--", "sleep", String(seconds)]);
    // CSV lines: "count,unit,event,..."; "<not counted>" when the probe never fired.
    const counts = new Map(err.split("\n").map((l) => l.split(",")).filter((f) => f.length > 2).map((f) => [f[2]!, Number(f[0]) || 0]));
    return probes.map((p) => [p[0], counts.get(`probe_workerd:${p[1]}`) ?? 0] as const);
  }).finally(() => t.stop());
  const r2 = (x: number): number => Math.round(x * 100) / 100;
  return {
    cycles: load.cycles,
    cycles_per_s: load.cycles_per_s,
    counts: Object.fromEntries(measured),
    per_cycle: Object.fromEntries(measured.map(([k, n]) => [k, r2(n / load.cycles)])),
    errors: load.errors,
  };
}

/** Rows of label and one number per target, with the engine's excess over the reference when both ran. */
function table(title: string, rows: [string, (number | undefined)[]][], names: TargetName[]): string {
  const both = names.length === 2;
  const head = ["", ...names, ...(both ? ["difference"] : [])];
  const fmt = (x: number | undefined) => (x === undefined ? "-" : x.toLocaleString("en-US"));
  const diff = ([a, b]: (number | undefined)[]) => {
    if (a === undefined || b === undefined) return "-";
    const decimals = Math.max(...[a, b].map((x) => (String(x).split(".")[1] ?? "").length));
    const d = Number((a - b).toFixed(decimals));
    return `${d > 0 ? "+" : ""}${fmt(d)}`;
  };
  const cells = rows.map(([k, v]) => [k, ...v.map(fmt), ...(both ? [diff(v)] : [])]);
  const w = head.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const line = (c: string[]) => c.map((x, i) => (i === 0 ? x.padEnd(w[i]!) : x.padStart(w[i]!))).join("  ");
  return [title, line(head), ...cells.map(line)].join("\n");
}

function listing(title: string, entries: Record<string, number>): string {
  return [title, ...Object.entries(entries).map(([k, v]) => `  ${String(v).padStart(7)}  ${k}`)].join("\n");
}

async function main(): Promise<void> {
  const targetFlag = flags.get("target") ?? "both";
  if (!["engine", "reference", "both"].includes(targetFlag)) throw new Error("--target must be engine, reference or both");
  const names: TargetName[] = targetFlag === "both" ? ["engine", "reference"] : [targetFlag as TargetName];
  if (spawnSync("perf", ["--version"], { stdio: "ignore" }).status !== 0) throw new Error("perf not found (linux-perf / linux-tools)");
  if (existsSync("/dev/shm")) process.env["TMPDIR"] = "/dev/shm"; // as npm run bench: Miniflare's state in memory
  const counting = flags.has("counts");
  // Miniflare hands this to workerd's V8, which then writes /tmp/perf-<pid>.map for perf
  // (not needed for counts, and the maps are removed only after sampling).
  if (!counting) process.env["MINIFLARE_WORKERD_V8_FLAGS"] = [process.env["MINIFLARE_WORKERD_V8_FLAGS"], "--perf-basic-prof"].filter(Boolean).join(" ");
  const settings = { clients: num("clients", 32), episodes: num("episodes", 256), warmup_s: num("warmup", 8), duration_s: num("duration", 20), ...(counting ? {} : { frequency_hz: num("freq", 2000) }) };

  if (counting) {
    const { probes, cleanup } = await addProbes();
    const results: Partial<Record<TargetName, Awaited<ReturnType<typeof countTarget>>>> = {};
    try {
      if (probes.length === 0) throw new Error("--counts: none of the probes could be added");
      for (const n of names) results[n] = await countTarget(await startTarget(n), probes);
    } finally {
      cleanup();
    }
    console.log(JSON.stringify({ settings, probes: Object.fromEntries(probes.map(([k, s]) => [k, s])), targets: results }, null, 2));
    const rows: [string, (number | undefined)[]][] = [["cycles/s", names.map((n) => results[n]?.cycles_per_s)], ...probes.map(([k]): [string, (number | undefined)[]] => [`${k} per cycle`, names.map((n) => results[n]?.per_cycle[k])])];
    process.stderr.write(`\n${table("SQLite per cycle (uprobes, exact counts):", rows, names)}\n`);
    return;
  }

  const dir = mkdtempSync(join(tmpdir(), "bench-perf-"));
  const results: Partial<Record<TargetName, Awaited<ReturnType<typeof sampleTarget>>>> = {};
  try {
    for (const n of names) results[n] = await sampleTarget(await startTarget(n), dir);
  } finally {
    if (flags.has("keep")) log(`kept ${names.map((n) => `${dir}/${n}.perf.data`).join(" ")} and /tmp/perf-<pid>.map: perf report -i FILE --no-children --sort sym`);
    else rmSync(dir, { recursive: true, force: true });
  }
  console.log(JSON.stringify({ settings, targets: results }, null, 2));
  const us = (n: TargetName, k: "total" | Category) => results[n]?.cpu_us_per_cycle[k];
  const rows: [string, (number | undefined)[]][] = [
    ...CATEGORIES.map((c): [string, (number | undefined)[]] => [c, names.map((n) => us(n, c))]),
    ["total (sampled)", names.map((n) => us(n, "total"))],
    ["total (/proc)", names.map((n) => results[n]?.proc_cpu_us_per_cycle ?? undefined)],
    ["cycles/s", names.map((n) => results[n]?.cycles_per_s)],
  ];
  const out = [table("workerd CPU per cycle, µs:", rows, names)];
  for (const n of names) {
    out.push(listing(`${n}: SQLite by the JavaScript that issued it, µs per cycle`, results[n]!.sqlite_by_js_caller_us));
    out.push(listing(`${n}: JavaScript functions by self time, µs per cycle`, results[n]!.js_top_functions_us));
  }
  process.stderr.write(`\n${out.join("\n\n")}\n`);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
