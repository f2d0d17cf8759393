/** The reward chart's arithmetic (src/dashboard/client/chart-geometry.ts), without a browser. */
import { describe, expect, it } from "vitest";
import { chartGeometryModule } from "../src/dashboard/client/chart-geometry";
import type { RewardHistoryEntry } from "../src/protocol/swarm";

const BOX = { width: 960, height: 300, left: 56, right: 20, top: 16, bottom: 40 };
const { layout } = chartGeometryModule();
const entry = (global_step: number, mean_reward: number, std_reward = 0.01): RewardHistoryEntry => ({
  global_step,
  mean_reward,
  std_reward,
  timestamp: 0,
  count: 1,
  min_reward: mean_reward,
  max_reward: mean_reward,
});
const curve = (n: number, at = (i: number) => i + 1) => Array.from({ length: n }, (_, i) => entry(at(i), 0.1 + i * 0.05));

describe("reward chart geometry", () => {
  it("keeps a plain curve linear, with no point off the scale", () => {
    const g = layout(curve(12), BOX);
    expect(g.xScale).toBe("linear");
    expect(g.points.every((p) => p.offScale === null)).toBe(true);
    expect(g.points[0]?.x).toBe(BOX.left);
    expect(g.points.at(-1)?.x).toBe(BOX.width - BOX.right);
  });

  it("spaces steps evenly when one is far from the others, labelled with their numbers", () => {
    const g = layout([...curve(5), entry(946_829_836, 0.4)], BOX);
    expect(g.xScale).toBe("ordinal");
    const gaps = g.points.slice(1).map((p, i) => p.x - g.points[i]!.x);
    expect(Math.max(...gaps) - Math.min(...gaps)).toBeLessThan(0.05);
    expect(g.xTicks.map((t) => t.value)).toContain(946_829_836);
  });

  it("draws a mean far off the others at the edge, and keeps the height for the rest", () => {
    const g = layout([...curve(6), entry(7, 2001.8)], BOX);
    const off = g.points.filter((p) => p.offScale !== null);
    expect(off.map((p) => [p.global_step, p.offScale, p.y])).toEqual([[7, "above", BOX.top]]);
    const ys = g.points.filter((p) => p.offScale === null).map((p) => p.y);
    expect(Math.max(...ys) - Math.min(...ys)).toBeGreaterThan(150);
    // And one far below: a negative mean among rewards near 1.
    const low = layout([...Array.from({ length: 9 }, (_, i) => entry(i, 0.9 + i * 0.01)), entry(9, -500)], BOX);
    expect(low.points.filter((p) => p.offScale !== null).map((p) => [p.global_step, p.offScale])).toEqual([[9, "below"]]);
  });

  it("does not take a real jump of the curve for an outlier", () => {
    const g = layout([entry(1, 0.2), entry(2, 0.25), entry(3, 0.3), entry(4, 0.9), entry(5, 0.95)], BOX);
    expect(g.points.every((p) => p.offScale === null)).toBe(true);
    const flat = layout([entry(1, 1), entry(2, 1), entry(3, 1), entry(4, 1.5)], BOX);
    expect(flat.points.every((p) => p.offScale === null)).toBe(true);
  });

  it("draws negative steps, and leaves out entries with a missing step or mean", () => {
    const broken = { ...entry(4, 0.5), mean_reward: null } as unknown as RewardHistoryEntry;
    const g = layout([entry(-2, 0.1), entry(-1, 0.2), entry(0, 0.3), entry(1, 0.4), broken, entry(Number.NaN, 0.3), { ...entry(2, 0.5), std_reward: Number.NaN }], BOX);
    expect(g.points.map((p) => p.global_step)).toEqual([-2, -1, 0, 1, 2]);
    expect(g.xScale).toBe("linear");
    expect(g.points.every((p) => Number.isFinite(p.x) && Number.isFinite(p.y))).toBe(true);
    expect(g.bandPath).not.toContain("NaN");
  });

  it("does not let one huge std flatten the means", () => {
    const g = layout([entry(1, 0.1), entry(2, 0.2, 500), entry(3, 0.3), entry(4, 0.4)], BOX);
    const ys = g.points.map((p) => p.y);
    expect(Math.max(...ys) - Math.min(...ys)).toBeGreaterThan(50);
  });
});
