/** The staleness benchmark's simulation (bench/staleness/sim.ts), which runs the engine's pacing rule: what pace promises. */
import { describe, expect, it } from "vitest";
import { simulate } from "../bench/staleness/sim";

const settings = { workers: 48, medianSeconds: 60, sigma: 1, batch: 32, stepSeconds: 20, maxStaleness: 2, horizonSeconds: 2 * 3600, retrySeconds: 2, seed: 11 };

describe("pace against drop in the staleness simulation", () => {
  it("pace discards nothing, never lets a rollout be consumed past max_staleness, and delivers every duration alike", () => {
    for (const seed of [1, 2, 3]) {
      const pace = simulate("pace", { ...settings, seed });
      expect(pace.started).toBeGreaterThan(0);
      expect(pace.discarded).toBe(0);
      expect(pace.delivered).toBe(pace.started);
      expect(pace.lag.max).toBeLessThanOrEqual(settings.maxStaleness);
      expect(pace.duration_bias).toBe(1);
    }
  });

  it("drop holds the bound only by discarding, and what it discards is the slow rollouts", () => {
    const drop = simulate("drop", settings);
    expect(drop.lag.max).toBeLessThanOrEqual(settings.maxStaleness);
    expect(drop.discarded).toBeGreaterThan(0);
    expect(drop.delivered + drop.discarded).toBe(drop.started);
    expect(drop.duration_bias).toBeLessThan(1);
    expect(drop.long_share_delivered).toBeLessThan(drop.long_share_started);
  });

  it("gives the same figures for the same seed", () => {
    expect(simulate("pace", settings)).toEqual(simulate("pace", settings));
  });
});
