/** Small helpers for the benchmark: latency summaries and CPU accounting from /proc. */
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";

export type Latency = { n: number; p50: number; p99: number; mean: number; max: number };

/** Nearest-rank percentiles in milliseconds, rounded to 0.01 ms. */
export function summarize(samples: number[]): Latency {
  if (samples.length === 0) return { n: 0, p50: 0, p99: 0, mean: 0, max: 0 };
  const s = [...samples].sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
  const r = (x: number) => Math.round(x * 100) / 100;
  return { n: s.length, p50: r(at(0.5)), p99: r(at(0.99)), mean: r(s.reduce((a, b) => a + b, 0) / s.length), max: r(s[s.length - 1]!) };
}

const CLK_TCK = 100; // USER_HZ on Linux

/** CPU seconds (user + system) a process has used so far, or 0 when it is gone. */
function cpuSecondsOf(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / CLK_TCK; // utime, stime
  } catch {
    return 0;
  }
}

function parentOf(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  } catch {
    return -1;
  }
}

function commOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    return "";
  }
}

/** The workerd processes started by this process (Miniflare's children), found through /proc. */
export function workerdPids(root = process.pid): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || commOf(pid) !== "workerd") continue;
    for (let p = parentOf(pid), hops = 0; p > 1 && hops < 8; p = parentOf(p), hops++) {
      if (p === root) {
        out.push(pid);
        break;
      }
    }
  }
  return out;
}

/** CPU seconds the whole machine spent busy (all cores, everything but idle and iowait). */
function machineBusySeconds(): number {
  try {
    const cpu = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
    const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = cpu;
    return (user + nice + system + irq + softirq + steal) / CLK_TCK;
  } catch {
    return 0;
  }
}

export type CpuUse = {
  /** This process: the load generator (and, in `npm run bench`, Miniflare's Node host). */
  loadgen_cpu_pct: number;
  /** The workerd processes serving the engine. */
  server_cpu_pct: number | null;
  /** Everything else on the machine in the same window: high means the figures are disturbed. */
  other_cpu_pct: number;
  wall_s: number;
};

/** CPU used between `start()` and `stop()`, each as a percentage of one core. */
export function cpuMeter(pids: number[]) {
  let t0 = 0;
  let self0 = process.cpuUsage();
  let server0 = 0;
  let machine0 = 0;
  const server = () => pids.reduce((a, p) => a + cpuSecondsOf(p), 0);
  return {
    start(): void {
      t0 = performance.now();
      self0 = process.cpuUsage();
      server0 = server();
      machine0 = machineBusySeconds();
    },
    stop(): CpuUse {
      const wall = (performance.now() - t0) / 1000;
      const d = process.cpuUsage(self0);
      const self = (d.user + d.system) / 1e6;
      const srv = server() - server0;
      const pct = (sec: number) => Math.round((sec / wall) * 1000) / 10;
      return {
        loadgen_cpu_pct: pct(self),
        server_cpu_pct: pids.length > 0 ? pct(srv) : null,
        other_cpu_pct: pct(Math.max(0, machineBusySeconds() - machine0 - self - srv)),
        wall_s: Math.round(wall * 100) / 100,
      };
    },
  };
}

/**
 * Waits (at most `maxMs`) until the rest of the machine is quiet: less than `limitPct` of one
 * core busy over a 2 s sample. Returns the last sample. The bench shares its 2 cores with
 * whatever else runs, and a busy neighbour halves the figures.
 */
export async function waitQuiet(limitPct: number, maxMs: number, onWait?: (pct: number) => void): Promise<number> {
  const deadline = Date.now() + maxMs;
  for (;;) {
    const a = machineBusySeconds();
    await new Promise((r) => setTimeout(r, 2000));
    const pct = Math.round(((machineBusySeconds() - a) / 2) * 1000) / 10;
    if (pct < limitPct || Date.now() >= deadline) return pct;
    onWait?.(pct);
  }
}

export const mean = (xs: number[]): number => Math.round((xs.reduce((a, b) => a + b, 0) / xs.length) * 1000) / 1000;

/** One side minus the other, round by round: the mean, its standard error, and in how many rounds this side was lower. */
export function paired(a: number[], b: number[]): { this: number; against: number; diff: number; se: number; this_cheaper_in: number } {
  const d = a.map((x, i) => x - b[i]!);
  const m = d.reduce((s, x) => s + x, 0) / d.length;
  const sd = d.length > 1 ? Math.sqrt(d.reduce((s, x) => s + (x - m) ** 2, 0) / (d.length - 1)) : NaN;
  const r3 = (x: number) => Math.round(x * 1000) / 1000;
  return { this: mean(a), against: mean(b), diff: r3(m), se: r3(sd / Math.sqrt(d.length)), this_cheaper_in: d.filter((x) => x < 0).length };
}

/**
 * Writes a run's report and chart to bench/results/<name>-latest.{json,svg} (ignored, next to
 * npm run bench's latest.*), and with `record` to <dir>recorded.{json,svg}, the run BENCHMARKS.md
 * quotes. `dir` is the bench's own directory, with its trailing slash.
 */
export async function writeBenchOutputs(dir: string, name: string, json: string, svg: string, record: boolean): Promise<void> {
  await mkdir(`${dir}../results`, { recursive: true });
  await writeFile(`${dir}../results/${name}-latest.json`, json);
  await writeFile(`${dir}../results/${name}-latest.svg`, svg);
  if (record) {
    await writeFile(`${dir}recorded.json`, json);
    await writeFile(`${dir}recorded.svg`, svg);
  }
}

/**
 * Miniflare keeps unpersisted state under os.tmpdir() and fsyncs every commit: on /dev/shm that
 * is memory, as a Durable Object's is in production. `--tmpdir DIR` (`dir`) says where instead
 * (/tmp: on disk).
 */
export function stateInMemory(dir: string | undefined): void {
  const tmp = dir ?? (existsSync("/dev/shm") ? "/dev/shm" : undefined);
  if (tmp) process.env["TMPDIR"] = tmp;
}

/**
 * `quiet(what)`: waits up to `seconds` (0: not at all) for the machine to go quiet before
 * measuring `what`, saying so while it waits; answers the last sample (% of a core others use).
 */
export function quietWaiter(seconds: number, log: (line: string) => void): (what: string) => Promise<number> {
  return async (what) => {
    if (seconds <= 0) return 0;
    return waitQuiet(25, seconds * 1000, (p) => log(`waiting for the machine to go quiet before ${what} (others use ${p}% of a core)`));
  };
}
