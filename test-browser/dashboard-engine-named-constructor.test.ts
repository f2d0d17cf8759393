/**
 * An engine may be named like an Object.prototype property (`constructor` is a valid name). The
 * dashboard kept its per-engine tokens in a plain object, so `tokenFor("constructor")` found
 * Object.prototype.constructor instead of falling back to the admin token, and the page said the
 * engine refused its token (docs/dashboard.md: the admin token "works too and lists every engine").
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, createEngine, startExchange, type TestEngine, type TestExchange } from "./support/exchange";
import { launchBrowser } from "./support/browser";
import { attr } from "./support/page-data";

let ex: TestExchange;
let engine: TestEngine;

beforeAll(async () => {
  ex = await startExchange();
  engine = await createEngine(ex, "constructor");
  await engine.as("trainer").updateEngineStatus({ engine_status: "ENGINE.BOOTING" });
});

afterAll(async () => {
  await ex?.stop();
});

describe("an engine named like an Object.prototype property", () => {
  it("opens with the admin token, as every other engine does", async () => {
    // The admin token reads it through the API.
    const res = await fetch(`${ex.url}/e/constructor/overview`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(res.status).toBe(200);

    const browser = await launchBrowser();
    try {
      const page = await browser.newPage();
      await page.goto(`${ex.url}/dashboard?refresh=0.3&engine=constructor&token=${ADMIN_TOKEN}`);
      await page.waitForFunction(() => Number(document.getElementById("updated")?.getAttribute("data-refreshes")) >= 2);
      const notice = (await page.isVisible("#notice")) ? await page.textContent("#notice") : null;
      expect({ notice, status: (await page.isVisible("#engine-status")) ? await attr(page, "#engine-status", "data-status") : null }).toEqual({
        notice: null,
        status: "ENGINE.BOOTING",
      });
    } finally {
      await browser.close();
    }
  });
});
