/**
 * How full an engine's store is, on the dashboard's status card, in a real Chromium against the
 * real Worker: the figure the overview reports, and once the store passes its high-water bound
 * (here 1 MiB, STORAGE_HIGH_WATER_BYTES) and writes that add data are refused 503
 * storage_full, a line in red that says so, which otherwise shows only as 503s to the trainer
 * and its clients.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLocalExchange } from "../scripts/local/exchange";
import { AdminClient, EngineClient } from "../src/client";
import { launchBrowser, watchErrors, type TestBrowser } from "./support/browser";
import { attr } from "./support/page-data";

const ADMIN = "storage-browser-admin";
const HIGH_WATER = 1024 * 1024;
let ex: Awaited<ReturnType<typeof startLocalExchange>>;
let browser: TestBrowser;
let tokens: Record<string, string>;
const engine = "filling";

const client = (role: string) => new EngineClient({ baseUrl: `${ex.url}/e/${engine}`, token: tokens[role] ?? "" });

/** A batch of one step row carrying about 300 KB of text. */
const bigRow = (i: number) => ({
  steps: [{ session_id: `s-${i}`, group_id: `g-${i}`, step_index: 0, messages: [{ role: "user", content: "x".repeat(300_000) }], response: "a", reward: 0, is_session_completed: false }],
});

beforeAll(async () => {
  ex = await startLocalExchange({ port: 0, persistDir: null, adminToken: ADMIN, claimKeySecret: "storage-browser-claim", vars: { STORAGE_HIGH_WATER_BYTES: String(HIGH_WATER) } });
  tokens = (await new AdminClient({ origin: ex.url, adminToken: ADMIN }).createEngine(engine)).tokens;
  browser = await launchBrowser();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await ex?.stop();
});

describe("the engine's store on the status card", () => {
  it("shows how full the store is, and in red once new data is refused", async () => {
    const page = await browser.newPage();
    const errors = watchErrors(page);
    await page.goto(`${ex.url}/dashboard?engine=${engine}&token=${tokens["viewer"]}&refresh=0.3`);
    await page.waitForSelector("#engine-storage");
    const before = (await client("viewer").overview()).storage;
    expect(before).toMatchObject({ high_water_bytes: HIGH_WATER, max_bytes: 10_000_000_000 });
    expect(Number(await attr(page, "#engine-storage", "data-high-water-bytes"))).toBe(HIGH_WATER);
    expect(await page.getAttribute("#engine-storage", "class")).toBe("sub");
    expect(await page.textContent("#engine-storage")).toMatch(/^store .* of 1 MiB$/);

    // Rows until the store passes its bound: the next batch is refused and stores nothing.
    let refused: Response | null = null;
    for (let i = 0; i < 20 && refused === null; i++) {
      const res = await fetch(`${ex.url}/e/${engine}/steps`, { method: "POST", headers: { authorization: `Bearer ${tokens["client"]}`, "content-type": "application/json" }, body: JSON.stringify(bigRow(i)) });
      if (res.status !== 200) refused = res;
    }
    expect(refused?.status).toBe(503);
    expect(await refused?.json()).toMatchObject({ error: "storage_full" });
    const after = (await client("viewer").overview()).storage;
    expect(after.used_bytes).toBeGreaterThan(HIGH_WATER);

    await page.waitForSelector("#engine-storage.full");
    expect(Number(await attr(page, "#engine-storage", "data-used-bytes"))).toBeGreaterThan(HIGH_WATER);
    expect(await page.textContent("#engine-storage")).toContain("new data is refused");
    expect(errors).toEqual([]);
  }, 60_000);
});
