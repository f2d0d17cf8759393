/**
 * An engine with thousands of episodes, thousands of buffer groups and a history of training
 * runs: the dashboard reads counts, one page of running episodes and one page of runs, never a
 * whole table, so it stays quick and its page stays small.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, startExchange, type TestEngine, type TestExchange } from "./support/exchange";
import { launchBrowser, watchErrors, type TestBrowser } from "./support/browser";
import { attr, bufferOnPage, groupsOf, legendCounts } from "./support/page-data";
import { postRows, sessionRows } from "./support/scripted-buffer";
import { scriptTrainingRuns } from "./support/scripted-training-runs";

const REGISTERED = 4000;
const CLAIMED = 300;
/** Groups of one session each: a third complete (ready to pull), the rest still open. */
const GROUPS = 3000;
const FINISHED_RUNS = 12;

let ex: TestExchange;
let browser: TestBrowser;
let engine: TestEngine;

beforeAll(async () => {
  ex = await startExchange();
  browser = await launchBrowser();
  engine = await createEngine(ex, "big");
  const trainer = engine.as("trainer");
  await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
  for (let i = 0; i < REGISTERED + CLAIMED; i += 1000) {
    const n = Math.min(1000, REGISTERED + CLAIMED - i);
    await trainer.batchRegisterEpisodes({ episodes: Array.from({ length: n }, (_, k) => ({ episode_uuid: `big-${String(i + k).padStart(5, "0")}` })) });
  }
  const client = engine.as("client");
  for (let i = 0; i < CLAIMED; i += 30) {
    await Promise.all(Array.from({ length: 30 }, (_, k) => client.claimEpisode({ client_uuid: `c-${i + k}`, discard_episode_timeout: 600 })));
  }
  await postRows(engine, Array.from({ length: GROUPS }, (_, g) => sessionRows(`g-${g}`, 0, g % 3 === 0)).flat());
  await scriptTrainingRuns(engine, { finished: FINISHED_RUNS });
});

afterAll(async () => {
  await browser?.close();
  await ex?.stop();
});

describe("dashboard with thousands of episodes and buffer groups", () => {
  it("shows the counts, one page of running episodes and of runs, and pages through the episodes", async () => {
    const page = await browser.newPage();
    const errors = watchErrors(page);
    const paths: string[] = [];
    const queries: string[] = [];
    page.on("request", (r) => {
      const url = new URL(r.url());
      paths.push(url.pathname);
      queries.push(url.pathname + url.search);
    });
    const t0 = Date.now();
    await page.goto(`${ex.url}/dashboard?engine=big&token=${engine.tokens.viewer}&refresh=1`);
    await page.waitForSelector("#episodes-table");
    const firstPaintMs = Date.now() - t0;

    expect(await legendCounts(page, "episode-counts")).toMatchObject({ registered: REGISTERED, claimed: CLAIMED });
    expect(Number(await attr(page, "#episodes-table", "data-total"))).toBe(CLAIMED);
    const firstPage = await page.$$eval("#episodes-table tbody tr", (els) => els.map((e) => e.getAttribute("data-episode")));
    expect(firstPage).toHaveLength(25);
    expect(await page.textContent("#episodes-range")).toContain("1–25 of 300");

    await page.click("#episodes-next");
    await page.waitForFunction(() => document.getElementById("episodes-range")?.textContent?.startsWith("26–50"));
    const secondPage = await page.$$eval("#episodes-table tbody tr", (els) => els.map((e) => e.getAttribute("data-episode")));
    expect(secondPage).toHaveLength(25);
    expect(secondPage.filter((id) => firstPage.includes(id))).toEqual([]);
    await page.click("#episodes-prev");
    await page.waitForFunction(() => document.getElementById("episodes-range")?.textContent?.startsWith("1–25"));

    // Buffer groups are counted, never listed; runs are read a page of six at a time.
    const { buffer } = await engine.as("viewer").health();
    expect((await bufferOnPage(page)).groups).toEqual(groupsOf(buffer));
    expect(buffer).toMatchObject({ pending_groups: (GROUPS * 2) / 3, ready_groups: GROUPS / 3 });
    expect(await page.$$eval("#runs-table tbody tr", (els) => els.length)).toBe(5);
    expect(await page.isVisible("#runs-older")).toBe(true);
    expect(new Set(queries.filter((q) => q.startsWith("/e/big/runs?")))).toEqual(new Set(["/e/big/runs?limit=6"]));

    // The page never asks for the whole episode table, and its DOM stays small.
    expect(paths).not.toContain("/e/big/get_episode_buffer");
    expect(await page.evaluate(() => document.getElementsByTagName("*").length)).toBeLessThan(1500);
    // Generous: a 2-core CI machine running workerd and Chromium side by side.
    expect(firstPaintMs).toBeLessThan(10_000);
    expect(errors).toEqual([]);
    await page.close();
  });
});
