/**
 * Where the reward chart's marks go: scales, ticks, the mean line and the std band, in SVG
 * user units. Pure arithmetic, kept apart from drawing so it can be tested without a browser.
 */
import type { RewardHistoryEntry } from "../../protocol/swarm";

export type ChartBox = { width: number; height: number; left: number; right: number; top: number; bottom: number };
export type ChartPoint = RewardHistoryEntry & { x: number; y: number };
export type Tick = { value: number; at: number };
export type ChartGeometry = {
  points: ChartPoint[];
  meanPath: string;
  bandPath: string;
  xTicks: Tick[];
  yTicks: Tick[];
  box: ChartBox;
};

export function chartGeometryModule() {
  /** About `count` round tick values (1, 2 or 5 times a power of ten) covering [lo, hi]. */
  function niceTicks(lo: number, hi: number, count: number): number[] {
    const span = hi - lo;
    const raw = span / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => span / s <= count) ?? 10 * mag;
    const ticks: number[] = [];
    // Rounding to the step's precision keeps 0.30000000000000004 off the axis.
    const digits = Math.max(0, -Math.floor(Math.log10(step)));
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(Number(v.toFixed(digits)));
    return ticks;
  }

  /** The y range: every mean ± std, padded, never empty (a flat curve gets a unit-wide band). */
  function yDomain(history: readonly RewardHistoryEntry[]): [number, number] {
    let lo = Infinity;
    let hi = -Infinity;
    for (const e of history) {
      lo = Math.min(lo, e.mean_reward - e.std_reward);
      hi = Math.max(hi, e.mean_reward + e.std_reward);
    }
    if (hi - lo < 1e-9) return [lo - 0.5, hi + 0.5];
    const pad = (hi - lo) * 0.08;
    return [lo - pad, hi + pad];
  }

  function layout(history: readonly RewardHistoryEntry[], box: ChartBox): ChartGeometry {
    const sorted = [...history].sort((a, b) => a.global_step - b.global_step);
    const first = sorted[0]?.global_step ?? 0;
    const last = sorted[sorted.length - 1]?.global_step ?? 0;
    // A single step is drawn in the middle rather than on the axis.
    const [x0, x1] = first === last ? [first - 1, last + 1] : [first, last];
    const [y0, y1] = yDomain(sorted);
    const plotW = box.width - box.left - box.right;
    const plotH = box.height - box.top - box.bottom;
    const sx = (step: number) => box.left + ((step - x0) / (x1 - x0)) * plotW;
    const sy = (r: number) => box.top + (1 - (r - y0) / (y1 - y0)) * plotH;
    const r2 = (v: number) => Math.round(v * 100) / 100;

    const points = sorted.map((e) => ({ ...e, x: r2(sx(e.global_step)), y: r2(sy(e.mean_reward)) }));
    const line = (ys: number[], xs: number[]) => xs.map((x, i) => `${i === 0 ? "M" : "L"}${x},${ys[i]}`).join(" ");
    const xs = points.map((p) => p.x);
    const meanPath = line(points.map((p) => p.y), xs);
    const upper = sorted.map((e) => r2(sy(e.mean_reward + e.std_reward)));
    const lower = sorted.map((e) => r2(sy(e.mean_reward - e.std_reward)));
    const bandPath = points.length === 0 ? "" : `${line(upper, xs)} ${line(lower.reverse(), [...xs].reverse()).replace(/^M/, "L")} Z`;

    // Steps are integers: no tick between two of them.
    const xTicks = niceTicks(x0, x1, Math.min(8, Math.max(1, x1 - x0)))
      .filter((v) => Number.isInteger(v))
      .map((value) => ({ value, at: r2(sx(value)) }));
    const yTicks = niceTicks(y0, y1, 5).map((value) => ({ value, at: r2(sy(value)) }));
    return { points, meanPath, bandPath, xTicks, yTicks, box };
  }

  return { layout, niceTicks };
}
export type ChartGeometryModule = ReturnType<typeof chartGeometryModule>;
