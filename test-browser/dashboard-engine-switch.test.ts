/**
 * A panel whose read fails keeps its last data (docs/dashboard.md), but after a switch to another
 * engine its last data was the engine left: with the new engine's /health failing, the rollout
 * buffer panel showed the old engine's groups under the new name. Opening another engine now
 * empties every engine panel first; a failing one says nothing was read yet.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, createEngine, startExchange, type TestEngine, type TestExchange } from "./support/exchange";
import { launchBrowser } from "./support/browser";
import { attr } from "./support/page-data";
import { postRows, sessionRows } from "./support/scripted-buffer";

let ex: TestExchange;
let busy: TestEngine;
let idle: TestEngine;

beforeAll(async () => {
  ex = await startExchange();
  busy = await createEngine(ex, "busy");
  await postRows(busy, [...sessionRows("g-0", 0, true), ...sessionRows("g-1", 0, false)]);
  idle = await createEngine(ex, "idle");
  await idle.as("trainer").updateEngineStatus({ engine_status: "ENGINE.BOOTING" });
});

afterAll(async () => {
  await ex?.stop();
});

describe("switching engines while the new engine's buffer read fails", () => {
  it("does not show the previous engine's rollout buffer under the new engine's name", async () => {
    // The idle engine's buffer was never used.
    const idleHealth = await idle.as("viewer").health();
    expect(idleHealth.buffer.pending_groups + idleHealth.buffer.ready_groups).toBe(0);

    const browser = await launchBrowser();
    try {
      const page = await browser.newPage();
      await page.route(/\/e\/idle\/health$/, (r) => r.fulfill({ status: 500, contentType: "application/json", body: JSON.stringify({ error: "internal_error", detail: "error id 1234" }) }));
      await page.goto(`${ex.url}/dashboard?refresh=0.3&engine=busy&token=${ADMIN_TOKEN}`);
      await page.waitForSelector("#buffer-groups");
      await page.waitForSelector("#engines [data-engine=idle]");
      await page.click("#engines [data-engine=idle]");
      await page.waitForFunction(() => document.getElementById("engine-status")?.getAttribute("data-status") === "ENGINE.BOOTING");
      await page.waitForSelector("#buffer-problem:not([hidden])");
      expect(await page.textContent("#engine-name")).toBe("idle");
      // What the buffer panel shows for engine "idle": busy's groups are not idle's.
      const shown = {
        groups: await page.locator("#buffer #buffer-groups").count(),
        pending: (await page.locator('#buffer-groups li[data-count="pending"]').count()) > 0 ? await attr(page, '#buffer-groups li[data-count="pending"]', "data-value") : null,
      };
      expect(shown).toEqual({ groups: 0, pending: null });
    } finally {
      await browser.close();
    }
  });
});
