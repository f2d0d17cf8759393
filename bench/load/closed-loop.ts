/**
 * How every benchmark loads its target. Closed loop: `workers` concurrent workers, each starting
 * its next iteration as soon as its last one ends, for an unmeasured warm-up (the ramp) and then
 * a measured window; or, with an infinite duration, until stop(). The iteration records its own
 * latencies for the requests that started inside the window (`loop.inWindow`), counts what it
 * completed (`loop.counted`) and reports failures (`loop.fault`). Over the window the CPU of
 * this process, of the target's workerd processes (and of any other groups of processes named)
 * and of the rest of the machine is metered; every 10 s a progress line goes to `log`.
 */
import { cpuMeter, type CpuUse } from "../stats";

export class LoopWindow {
  readonly t0 = performance.now();
  /** The measured window, in performance.now() milliseconds. */
  readonly start: number;
  readonly end: number;
  stopped = false;
  measuring = false;
  /** Completed units of work inside the window (the iteration decides what counts). */
  counted = 0;
  /** Failures while measuring; the first five (warm-up included) are kept as samples. */
  errors = 0;
  readonly errorSamples: string[] = [];

  constructor(warmupSec: number, durationSec: number) {
    this.start = this.t0 + warmupSec * 1000;
    this.end = this.start + durationSec * 1000;
  }
  inWindow(t: number): boolean {
    return t >= this.start && t <= this.end;
  }
  fault(msg: string): void {
    if (this.measuring) this.errors++;
    if (this.errorSamples.length < 5) this.errorSamples.push(msg);
  }
}

export type LoopOptions = {
  workers: number;
  warmupSec: number;
  /** Measured seconds; Infinity runs until stop(). */
  durationSec: number;
  /** Names the load in progress lines, with the unit `counted` counts. */
  label: string;
  unit: string;
  /** The target's processes (workerd), whose CPU is metered over the window. */
  serverPids?: number[];
  /** More processes metered over the window, each group on its own (a relay's proxy, say): `server_cpu_pct` of `done`'s `groups`. */
  groupPids?: Record<string, number[]>;
  log?: (line: string) => void;
};

export type RunningLoop = {
  window: LoopWindow;
  /** Ends the window now; the workers finish their current iteration. */
  stop(): void;
  /** Resolves with the window's CPU use once every worker has finished. */
  done: Promise<LoopCpu>;
};

export type LoopCpu = CpuUse & { groups: Record<string, CpuUse> };

/** `worker(i, window)` sets up worker i's state and returns its iteration. */
export function closedLoop(o: LoopOptions, worker: (i: number, window: LoopWindow) => () => Promise<void>): RunningLoop {
  const w = new LoopWindow(o.warmupSec, o.durationSec);
  const log = o.log ?? (() => {});
  const meter = cpuMeter(o.serverPids ?? []);
  const groups = Object.entries(o.groupPids ?? {}).map(([name, pids]) => [name, cpuMeter(pids)] as const);
  const stopMeters = (): LoopCpu => ({ ...meter.stop(), groups: Object.fromEntries(groups.map(([name, m]) => [name, m.stop()])) });
  let cpu: LoopCpu | null = null;
  const stop = (): void => {
    if (w.stopped) return;
    w.stopped = true;
    cpu = stopMeters();
  };
  const progress = setInterval(() => {
    const now = performance.now();
    const s = (now - w.start) / 1000;
    if (now < w.start) log(`  ${o.label}: warming up`);
    else log(`  ${o.label}: ${s.toFixed(0)}${Number.isFinite(o.durationSec) ? `/${o.durationSec}` : ""}s, ${w.counted} ${o.unit}, ${(w.counted / s).toFixed(0)}/s`);
  }, 10_000);
  const timers = [
    setTimeout(() => {
      w.measuring = true;
      meter.start();
      for (const [, m] of groups) m.start();
    }, w.start - w.t0),
  ];
  if (Number.isFinite(o.durationSec)) timers.push(setTimeout(stop, w.end - w.t0));
  const done = (async () => {
    try {
      await Promise.all(
        Array.from({ length: o.workers }, async (_, i) => {
          const iteration = worker(i, w);
          while (!w.stopped) await iteration();
        }),
      );
    } finally {
      clearInterval(progress);
      for (const t of timers) clearTimeout(t);
    }
    return cpu ?? stopMeters();
  })();
  return { window: w, stop, done };
}

/** Runs tasks 0 .. n-1 with at most `width` in flight: a fixed amount of work, not a duration. */
export async function inParallel(n: number, width: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, n) }, async () => {
      while (next < n) await task(next++);
    }),
  );
}
