/**
 * What the dashboard shows when it cannot show an engine's data, in a real Chromium: no token,
 * a refused token, an unknown engine (each a clear message and a sign-in form, never a blank
 * page), an engine with no data (empty states), and the sign-in form and admin token at work.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import { ADMIN_TOKEN, createEngine, startExchange, type TestEngine, type TestExchange } from "./support/exchange";
import { launchBrowser, watchErrors, type TestBrowser } from "./support/browser";
import { attr } from "./support/page-data";

let ex: TestExchange;
let fresh: TestEngine;
let other: TestEngine;

beforeAll(async () => {
  ex = await startExchange();
  fresh = await createEngine(ex, "fresh");
  other = await createEngine(ex, "other");
  await other.as("trainer").updateEngineStatus({ engine_status: "ENGINE.BOOTING" });
});

afterAll(async () => {
  await ex?.stop();
});

/** Each case gets its own browser profile: no token saved by an earlier case can help it. */
async function openDashboard(query: string): Promise<{ page: Page; browser: TestBrowser; errors: string[] }> {
  const browser = await launchBrowser();
  const page = await browser.newPage();
  const errors = watchErrors(page);
  await page.goto(`${ex.url}/dashboard?refresh=0.3&${query}`);
  await page.waitForFunction(() => Number(document.getElementById("updated")?.getAttribute("data-refreshes")) >= 1);
  return { page, browser, errors };
}

describe("dashboard without usable data", () => {
  it("asks for a token when it has none", async () => {
    const { page, browser, errors } = await openDashboard("engine=fresh");
    try {
      expect(await page.isVisible("#login")).toBe(true);
      expect(await page.textContent("#login-why")).toContain("Paste a token of engine 'fresh'");
      expect(await page.inputValue("#login-engine")).toBe("fresh");
      expect(await page.isHidden("#engine-view")).toBe(true);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
  });

  it("says so when the token is refused, and accepts a good one from the form", async () => {
    const { page, browser } = await openDashboard("engine=fresh&token=rx_viewer_not-a-real-token");
    try {
      expect(await attr(page, "#notice", "data-kind")).toBe("error");
      const text = await page.textContent("#notice");
      expect(text).toContain("Engine 'fresh' did not accept this token");
      expect(text).toContain("401");
      expect(await page.isVisible("#login")).toBe(true);
      expect(await page.isHidden("#engine-view")).toBe(true);

      await page.fill("#login-token", fresh.tokens.viewer);
      await page.click("#login button[type=submit]");
      await page.waitForSelector("#engine-view:not([hidden])");
      expect(await page.isHidden("#notice")).toBe(true);
      expect(await page.isHidden("#login")).toBe(true);
    } finally {
      await browser.close();
    }
  });

  it("names an engine that does not exist", async () => {
    const { page, browser } = await openDashboard(`engine=no-such-engine&token=${ADMIN_TOKEN}`);
    try {
      expect(await page.textContent("#notice")).toContain("No engine named 'no-such-engine'");
      expect(await page.isHidden("#engine-view")).toBe(true);
    } finally {
      await browser.close();
    }
  });

  it("shows empty states for an engine with no data", async () => {
    const { page, browser, errors } = await openDashboard(`engine=fresh&token=${fresh.tokens.viewer}`);
    try {
      await page.waitForSelector("#engine-view:not([hidden])");
      expect(await attr(page, "#engine-status", "data-status")).toBe("ENGINE.OFFLINE");
      expect(await page.isVisible("#quiet-hint")).toBe(true);
      expect(await page.textContent("#reward-empty")).toContain("No reward history yet");
      expect(await page.textContent("#episodes-empty")).toContain("No episode is running");
      expect(await page.isVisible("#tasks-empty")).toBe(true);
      expect(await page.locator("#reward-chart").count()).toBe(0);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
  });

  it("lists every engine for the admin token and switches between them", async () => {
    const { page, browser, errors } = await openDashboard(`engine=fresh&token=${ADMIN_TOKEN}`);
    try {
      await page.waitForSelector("#engines [data-engine=other]");
      const tabs = await page.$$eval("#engines [data-engine]", (els) => els.map((e) => e.getAttribute("data-engine")));
      expect(tabs).toEqual(["fresh", "other"]);
      await page.click("#engines [data-engine=other]");
      await page.waitForFunction(() => document.getElementById("engine-status")?.getAttribute("data-status") === "ENGINE.BOOTING");
      expect(page.url()).toContain("engine=other");
      expect(page.url()).not.toContain("token=");
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
  });
});
