import { describe, expect, it } from "vitest";
import { Coalescer } from "../src/coalescer";
import { manualSchedule } from "./support/manual-schedule";

describe("Coalescer", () => {
  it("sends the calls of one window as one batch and answers each with its own result", async () => {
    const s = manualSchedule();
    const batches: number[][] = [];
    const c = new Coalescer<number, string>(50, 100, async (items) => {
      batches.push(items);
      return items.map((i) => `r${i}`);
    }, s.schedule);
    const answers = [1, 2, 3].map((i) => c.submit(i));
    expect(batches).toEqual([]); // nothing leaves before the window closes
    expect(s.armed()).toBe(1);
    s.fire();
    expect(await Promise.all(answers)).toEqual(["r1", "r2", "r3"]);
    expect(batches).toEqual([[1, 2, 3]]);

    // A call after the batch left is not answered from it: it waits for the next window.
    const late = c.submit(4);
    s.fire();
    expect(await late).toBe("r4");
    expect(batches).toEqual([[1, 2, 3], [4]]);
  });

  it("sends at once when a batch is full, and splits overflow", async () => {
    const s = manualSchedule();
    const batches: number[][] = [];
    const c = new Coalescer<number, number>(50, 2, async (items) => {
      batches.push(items);
      return items;
    }, s.schedule);
    const a = [c.submit(1), c.submit(2)];
    expect(batches).toEqual([[1, 2]]);
    expect(s.armed()).toBe(0);
    const b = c.submit(3);
    s.fire();
    await Promise.all([...a, b]);
    expect(batches).toEqual([[1, 2], [3]]);
  });

  it("fails every call of a batch whose request failed, and only those", async () => {
    const s = manualSchedule();
    let fail = true;
    const c = new Coalescer<number, number>(50, 100, async (items) => {
      if (fail) throw new Error("exchange down");
      return items;
    }, s.schedule);
    const doomed = [c.submit(1), c.submit(2)];
    s.fire();
    for (const d of doomed) await expect(d).rejects.toThrow("exchange down");
    fail = false;
    const ok = c.submit(3);
    s.fire();
    expect(await ok).toBe(3);
  });

  it("refuses a batch answer of the wrong length instead of mismatching answers", async () => {
    const s = manualSchedule();
    const c = new Coalescer<number, number>(50, 100, async () => [1], s.schedule);
    const p = [c.submit(1), c.submit(2)];
    s.fire();
    for (const x of p) await expect(x).rejects.toThrow("a batch of 2 got 1 answers");
  });
});
