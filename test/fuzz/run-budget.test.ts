/**
 * The fuzz suite's time budget, with the real fast-check and an injected clock: each run of
 * the property moves it 10 ms, so a budget of 55 ms lets exactly six runs start.
 */
import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import { assertWithinBudget, type Budget } from "./run-budget";

function clocked(limitMs: number, minRuns: number) {
  const clock = { t: 0 };
  const budget: Budget = { limitMs, minRuns, now: () => clock.t };
  const run = async (n: number) => {
    clock.t += 10;
    if (!Number.isInteger(n)) throw new Error("not an integer");
  };
  return { budget, run };
}

describe("a fuzz run under a time budget", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("says how many runs ran and how many the limit left unstarted, and passes when enough ran", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const { budget, run } = clocked(55, 6);
    const details = await assertWithinBudget(fc.integer(), run, { numRuns: 20, seed: 7 }, budget);
    expect(details).toMatchObject({ failed: false, interrupted: true, numRuns: 6 });
    expect(warn).toHaveBeenCalledExactlyOnceWith("fuzz: 6 runs ran in the time limit of 55 ms and 14 were not started (seed 7)");
  });

  it("fails when fewer than the minimum ran, naming the limit and the counts", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { budget, run } = clocked(55, 10);
    await expect(assertWithinBudget(fc.integer(), run, { numRuns: 20, seed: 7 }, budget)).rejects.toThrow(
      "fuzz: too few runs, at least 10 must run: 6 runs ran in the time limit of 55 ms and 14 were not started (seed 7)",
    );
    // A limit reached before the first run: none ran, none passed.
    const none = clocked(0, 1);
    await expect(assertWithinBudget(fc.integer(), none.run, { numRuns: 20, seed: 7 }, none.budget)).rejects.toThrow("0 runs ran in the time limit of 0 ms and 20 were not started");
  });

  it("stays quiet when every run ran", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const { budget, run } = clocked(1_000, 10);
    expect(await assertWithinBudget(fc.integer(), run, { numRuns: 20, seed: 7 }, budget)).toMatchObject({ failed: false, interrupted: false, numRuns: 20 });
    expect(warn).not.toHaveBeenCalled();
  });

  it("reports a failing property as fc.assert does, with the seed and path that replay it", async () => {
    const { budget } = clocked(1_000, 10);
    const below50 = async (n: number) => {
      if (n >= 50) throw new Error(`${n} is not below 50`);
    };
    await expect(assertWithinBudget(fc.integer({ min: 0, max: 100 }), below50, { numRuns: 100, seed: 7 }, budget)).rejects.toThrow(
      /^Property failed after \d+ tests\n\{ seed: 7, path: "[\d:]+", endOnFailure: true \}\nCounterexample: \[50\]/,
    );
  });
});
