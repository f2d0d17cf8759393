/**
 * Where the reward chart's marks go: scales, ticks, the mean line and the std band, in SVG
 * user units. Pure arithmetic, kept apart from drawing so it can be tested without a browser.
 *
 * It stays readable whatever the history holds. Steps far apart (one odd step number among
 * consecutive ones) put the steps at even spacing, in order, labelled with their numbers,
 * instead of one linear axis that would squash the real curve into a pixel. A mean far off
 * the others is drawn at the edge, marked off-scale, rather than stretching the axis; entries
 * whose step or mean is missing or not a number are left out.
 */
import type { RewardHistoryEntry } from "../../protocol/swarm";

export type ChartBox = { width: number; height: number; left: number; right: number; top: number; bottom: number };
export type ChartPoint = RewardHistoryEntry & { x: number; y: number; offScale: "above" | "below" | null };
export type Tick = { value: number; at: number };
export type ChartGeometry = {
  points: ChartPoint[];
  meanPath: string;
  bandPath: string;
  xTicks: Tick[];
  yTicks: Tick[];
  /** "linear": x is the step number; "ordinal": steps at even spacing, in order (they were too far apart). */
  xScale: "linear" | "ordinal";
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

  const median = (xs: readonly number[]): number => {
    const s = [...xs].sort((a, b) => a - b);
    const mid = Math.floor(s.length / 2);
    return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
  };

  /**
   * Whether the steps are too unevenly spaced for a linear axis: the widest gap between two
   * consecutive steps is more than 20 times the typical (median) one.
   */
  function unevenSteps(steps: readonly number[]): boolean {
    if (steps.length < 3) return false;
    const gaps: number[] = [];
    for (let i = 1; i < steps.length; i++) gaps.push(steps[i]! - steps[i - 1]!);
    const typical = median(gaps);
    return Math.max(...gaps) > 20 * Math.max(typical, 1);
  }

  /**
   * The means far off all the others: repeatedly the most extreme mean, while it lies more than
   * five times the spread of the rest beyond them, for at most a tenth of the points (at least
   * one once there are three). A flat rest gets a spread of half its level, so a small step up
   * from a flat curve is not taken for an outlier.
   */
  function outliers(means: readonly number[]): Set<number> {
    const off = new Set<number>();
    if (means.length < 3) return off;
    const order = means.map((v, i) => [v, i] as const).sort((a, b) => a[0] - b[0]);
    let lo = 0;
    let hi = order.length - 1;
    const most = Math.max(1, Math.floor(means.length / 10));
    while (off.size < most && hi - lo >= 2) {
      const restLow = order[lo + 1]![0];
      const restHigh = order[hi - 1]![0];
      const below = restLow - order[lo]![0];
      const above = order[hi]![0] - restHigh;
      const spread = (rest: number, a: number, b: number) => Math.max(rest, Math.abs((a + b) / 2) * 0.5, 1e-9);
      if (above >= below && above > 5 * spread(order[hi - 1]![0] - order[lo]![0], order[lo]![0], order[hi - 1]![0])) {
        off.add(order[hi]![1]);
        hi--;
      } else if (below > above && below > 5 * spread(order[hi]![0] - order[lo + 1]![0], order[lo + 1]![0], order[hi]![0])) {
        off.add(order[lo]![1]);
        lo++;
      } else break;
    }
    return off;
  }

  /** The y range: the kept means ± their std (at most the means' own spread), padded, never empty. */
  function yDomain(kept: readonly RewardHistoryEntry[]): [number, number] {
    const means = kept.map((e) => e.mean_reward);
    const meanSpread = Math.max(...means) - Math.min(...means);
    const cap = Math.max(meanSpread, Math.abs(median(means)) * 0.5, 1e-9);
    let lo = Infinity;
    let hi = -Infinity;
    for (const e of kept) {
      const std = Math.min(e.std_reward, cap);
      lo = Math.min(lo, e.mean_reward - std);
      hi = Math.max(hi, e.mean_reward + std);
    }
    if (hi - lo < 1e-9) return [lo - 0.5, hi + 0.5];
    const pad = (hi - lo) * 0.08;
    return [lo - pad, hi + pad];
  }

  function layout(history: readonly RewardHistoryEntry[], box: ChartBox): ChartGeometry {
    const usable = history
      .filter((e) => Number.isFinite(e.global_step) && Number.isFinite(e.mean_reward))
      .map((e) => (Number.isFinite(e.std_reward) && e.std_reward >= 0 ? e : { ...e, std_reward: 0 }));
    const sorted = usable.sort((a, b) => a.global_step - b.global_step);
    const steps = sorted.map((e) => e.global_step);
    const xScale = unevenSteps(steps) ? "ordinal" : "linear";
    const plotW = box.width - box.left - box.right;
    const plotH = box.height - box.top - box.bottom;
    const r2 = (v: number) => Math.round(v * 100) / 100;

    let sx: (step: number, i: number) => number;
    let xTicks: Tick[];
    if (xScale === "ordinal") {
      const at = (i: number) => box.left + (i / (sorted.length - 1)) * plotW;
      sx = (_step, i) => at(i);
      const every = Math.max(1, Math.ceil(sorted.length / 8));
      xTicks = sorted.flatMap((e, i) => (i % every === 0 || i === sorted.length - 1 ? [{ value: e.global_step, at: r2(at(i)) }] : []));
    } else {
      const first = steps[0] ?? 0;
      const last = steps[steps.length - 1] ?? 0;
      // A single step is drawn in the middle rather than on the axis.
      const [x0, x1] = first === last ? [first - 1, last + 1] : [first, last];
      sx = (step) => box.left + ((step - x0) / (x1 - x0)) * plotW;
      // Steps are integers: no tick between two of them.
      xTicks = niceTicks(x0, x1, Math.min(8, Math.max(1, x1 - x0)))
        .filter((v) => Number.isInteger(v))
        .map((value) => ({ value, at: r2(sx(value, 0)) }));
    }

    const off = outliers(sorted.map((e) => e.mean_reward));
    const kept = sorted.filter((_e, i) => !off.has(i));
    const [y0, y1] = kept.length > 0 ? yDomain(kept) : [0, 1];
    const sy = (r: number) => box.top + (1 - (Math.min(y1, Math.max(y0, r)) - y0) / (y1 - y0)) * plotH;

    const points: ChartPoint[] = sorted.map((e, i) => ({
      ...e,
      x: r2(sx(e.global_step, i)),
      y: r2(sy(e.mean_reward)),
      offScale: !off.has(i) ? null : e.mean_reward > y1 ? "above" : "below",
    }));
    const line = (ys: number[], xs: number[]) => xs.map((x, i) => `${i === 0 ? "M" : "L"}${x},${ys[i]}`).join(" ");
    const xs = points.map((p) => p.x);
    const meanPath = line(points.map((p) => p.y), xs);
    const upper = sorted.map((e) => r2(sy(e.mean_reward + e.std_reward)));
    const lower = sorted.map((e) => r2(sy(e.mean_reward - e.std_reward)));
    const bandPath = points.length === 0 ? "" : `${line(upper, xs)} ${line(lower.reverse(), [...xs].reverse()).replace(/^M/, "L")} Z`;
    const yTicks = niceTicks(y0, y1, 5).map((value) => ({ value, at: r2(sy(value)) }));
    return { points, meanPath, bandPath, xTicks, yTicks, xScale, box };
  }

  return { layout, niceTicks };
}
export type ChartGeometryModule = ReturnType<typeof chartGeometryModule>;
