/**
 * The reward chart and the runs of an engine's history, in a real Chromium: the current run by
 * default, a picker for the earlier ones, and a chart that stays readable with the step numbers
 * and rewards users have really sent (one step number of 946,829,836, a mean of 2001.8), and
 * with negative rewards, a step whose episodes ended without a reward and one without any.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import { createEngine, startExchange, type TestEngine, type TestExchange } from "./support/exchange";
import { launchBrowser, watchErrors, type TestBrowser } from "./support/browser";
import { attr, chartPoints } from "./support/page-data";

let ex: TestExchange;
let engine: TestEngine;
let browser: TestBrowser;
let page: Page;
let errors: string[];

/** One global step: an episode per reward (null: an episode that ended without one), claimed and ended. */
async function step(globalStep: number, rewards: (number | null)[], e: TestEngine = engine): Promise<void> {
  const trainer = e.as("trainer");
  const client = e.as("client");
  await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: globalStep });
  for (const [i, reward] of rewards.entries()) {
    const id = `s${globalStep}-${i}-${Math.random().toString(36).slice(2, 7)}`;
    await trainer.registerEpisode({ episode_uuid: id });
    const c = await client.claimEpisode({ client_uuid: `c${i}`, discard_episode_timeout: 60 });
    await client.endEpisode({ client_uuid: `c${i}`, episode_uuid: c.episode_uuid, task_id: "t", workflow_output: { reward, metadata: { task_id: "t" } } });
  }
}

beforeAll(async () => {
  ex = await startExchange();
  engine = await createEngine(ex, "history");
  // Run 1: steps 1-6 with a rising reward, then an odd client's step 946,829,836 with a huge mean.
  for (let s = 1; s <= 6; s++) await step(s, [0.1 * s, 0.1 * s + 0.05]);
  await step(946_829_836, [2001.8]);
  // Run 2: the trainer restarted at step 1.
  await step(1, [0.9, 0.8]);
  await step(2, [0.95, 0.9]);
  await step(3, [0.9]);
  browser = await launchBrowser();
  page = await browser.newPage();
  errors = watchErrors(page);
  await page.goto(`${ex.url}/dashboard?refresh=0.3&engine=history&token=${engine.tokens.viewer}`);
  await page.waitForSelector("#reward-chart");
});

afterAll(async () => {
  await browser?.close();
  await ex?.stop();
});

const xs = (p: Page) => p.$$eval("#reward-chart circle.point", (els) => els.map((e) => Number(e.getAttribute("cx"))));
const ys = (p: Page) => p.$$eval("#reward-chart circle.point:not(.off-scale)", (els) => els.map((e) => Number(e.getAttribute("cy"))));

describe("the reward chart and the runs of the history", () => {
  it("shows the current run by default, and lists every run in its picker", async () => {
    const { history, run } = await engine.as("viewer").getRewardHistory();
    expect((await chartPoints(page)).map((p) => p.step)).toEqual(history.map((h) => h.global_step));
    expect(history.map((h) => h.global_step)).toEqual([1, 2]);
    expect(await attr(page, "#rewards > div", "data-run")).toBe(String(run));
    const options = await page.$$eval("#run-picker option", (els) => els.map((e) => ({ value: (e as HTMLOptionElement).value, text: e.textContent ?? "" })));
    expect(options.map((o) => o.value)).toEqual(["", "1"]);
    expect(options[0]?.text).toContain("run 2 (current) · step backwards · 2 steps");
    expect(options[1]?.text).toContain("run 1 · trainer started · 7 steps");
    expect(errors).toEqual([]);
  });

  it("draws an earlier run when it is picked, readable despite one odd step number and one odd mean", async () => {
    await page.selectOption("#run-picker", "1");
    await page.waitForSelector('#rewards > div[data-run="1"] #reward-chart');
    const points = await chartPoints(page);
    expect(points.map((p) => p.step)).toEqual([1, 2, 3, 4, 5, 6, 946_829_836]);
    // The steps in order at even spacing, not one linear axis up to 946,829,836.
    expect(await attr(page, "#reward-chart", "data-x-scale")).toBe("ordinal");
    const x = await xs(page);
    const gaps = x.slice(1).map((v, i) => v - x[i]!);
    expect(Math.min(...gaps)).toBeGreaterThan(50);
    expect(Math.max(...gaps) - Math.min(...gaps)).toBeLessThan(1);
    // The mean of 2001.8 is drawn at the edge, marked; the others keep the height of the plot.
    expect(await page.$$eval("#reward-chart circle.point.off-scale", (els) => els.map((e) => e.getAttribute("data-step")))).toEqual(["946829836"]);
    expect(await attr(page, "#reward-chart circle.off-scale", "data-off-scale")).toBe("above");
    const y = await ys(page);
    expect(y).toHaveLength(6);
    expect(Math.max(...y) - Math.min(...y)).toBeGreaterThan(150);
    // Rising rewards: each step higher on the page than the one before (smaller y).
    expect(y).toEqual([...y].sort((a, b) => b - a));
    expect(await page.textContent("#reward-chart .axis.x .label")).toContain("not to scale");
    expect(errors).toEqual([]);
  });

  it("keeps the picked run across refreshes, and goes back to the current one when asked", async () => {
    const seen = Number(await attr(page, "#updated", "data-refreshes"));
    await page.waitForFunction((n) => Number(document.getElementById("updated")?.getAttribute("data-refreshes")) >= n + 2, seen);
    expect(await attr(page, "#rewards > div", "data-run")).toBe("1");
    await page.selectOption("#run-picker", "");
    await page.waitForSelector('#rewards > div[data-run="2"] #reward-chart');
    expect(await attr(page, "#reward-chart", "data-x-scale")).toBe("linear");
    expect((await chartPoints(page)).map((p) => p.step)).toEqual([1, 2]);
    expect(errors).toEqual([]);
  });
});

describe("the reward chart with negative and missing values", () => {
  it("draws negative means on a readable axis, keeps a missing step's place, and leaves reward-less episodes out", async () => {
    const signs = await createEngine(ex, "signs");
    // Means rising from -1 through 0; step 4's episodes ended without a reward, so it has no
    // entry; step 6 has one such episode beside two that cancel out; step 10's mean is far below.
    const means: [number, (number | null)[]][] = [
      [1, [-1]],
      [2, [-0.8]],
      [3, [-0.6]],
      [4, [null, null]],
      [5, [-0.2]],
      [6, [0.05, -0.05, null]],
      [7, [0.2]],
      [8, [0.4]],
      [9, [0.6]],
      [10, [-2001.8]],
    ];
    for (const [s, rewards] of means) await step(s, rewards, signs);
    await signs.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 11 });
    const { history } = await signs.as("viewer").getRewardHistory();
    expect(history.map((h) => h.global_step)).toEqual([1, 2, 3, 5, 6, 7, 8, 9, 10]);

    const p = await browser.newPage();
    const pageErrors = watchErrors(p);
    await p.goto(`${ex.url}/dashboard?refresh=0.3&engine=signs&token=${signs.tokens.viewer}`);
    await p.waitForSelector('#reward-chart[data-points="9"]');
    const points = await chartPoints(p);
    expect(points.map((q) => [q.step, q.mean, q.count])).toEqual(history.map((h) => [h.global_step, h.mean_reward, h.count]));
    // The episode without a reward is not counted: step 6 is its two rewards'.
    expect(points.find((q) => q.step === 6)?.count).toBe(2);

    // A linear x-axis from step 1 to 10, where the missing step 4 keeps its place.
    expect(await attr(p, "#reward-chart", "data-x-scale")).toBe("linear");
    const x = await xs(p);
    const perStep = (x[1]! - x[0]!) / (points[1]!.step - points[0]!.step);
    expect(perStep).toBeGreaterThan(50);
    for (const [i, q] of points.entries()) expect(Math.abs(x[i]! - x[0]! - perStep * (q.step - points[0]!.step))).toBeLessThan(0.05);

    // The mean of -2001.8 is drawn at the bottom edge, marked; the rest keep the plot's height.
    expect(await p.$$eval("#reward-chart circle.point.off-scale", (els) => els.map((e) => [e.getAttribute("data-step"), e.getAttribute("data-off-scale")]))).toEqual([["10", "below"]]);
    const y = await ys(p);
    expect(y).toHaveLength(8);
    expect(Math.max(...y) - Math.min(...y)).toBeGreaterThan(150);
    expect(y).toEqual([...y].sort((a, b) => b - a));
    // The y-axis spans the kept means, below and above zero, not the odd one.
    const yTicks = await p.$$eval("#reward-chart .axis.y text", (els) => els.map((e) => Number(e.textContent)));
    expect(yTicks.every(Number.isFinite)).toBe(true);
    expect(Math.min(...yTicks)).toBeLessThan(0);
    expect(Math.min(...yTicks)).toBeGreaterThan(-2);
    expect(Math.max(...yTicks)).toBeGreaterThan(0);
    expect(Math.max(...yTicks)).toBeLessThan(2);
    const paths = await p.$$eval("#reward-chart path", (els) => els.map((e) => e.getAttribute("d") ?? ""));
    expect(paths.every((d) => d !== "" && !d.includes("NaN"))).toBe(true);
    expect(pageErrors).toEqual([]);
    await p.close();
  });
});
