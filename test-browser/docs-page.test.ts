/**
 * /docs in a real Chromium: it lists every operation of /openapi.json once (the token-in-URL
 * twins are described in its intro, not listed again), and its try-it form sends real requests
 * to the exchange and shows their answers.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, startExchange, type TestExchange } from "./support/exchange";
import { launchBrowser, watchErrors } from "./support/browser";

let ex: TestExchange;

beforeAll(async () => {
  ex = await startExchange();
});

afterAll(async () => {
  await ex?.stop();
});

describe("/docs", () => {
  it("lists every route once and sends a real request from its try-it form", async () => {
    const engine = await createEngine(ex, "docs-demo");
    const doc = (await (await fetch(`${ex.url}/openapi.json`)).json()) as { paths: Record<string, Record<string, unknown>> };
    const expected = Object.entries(doc.paths)
      .filter(([path]) => !path.includes("{token}"))
      .flatMap(([path, item]) => Object.keys(item).map((method) => `${method} ${path}`));
    const browser = await launchBrowser();
    try {
      const page = await browser.newPage();
      const errors = watchErrors(page);
      await page.goto(`${ex.url}/docs`);
      await page.waitForSelector(".op");
      const listed = await page.$$eval(".op", (els) => els.map((e) => `${e.getAttribute("data-method")} ${e.getAttribute("data-path")}`));
      expect([...listed].sort()).toEqual([...expected].sort());

      await page.fill("#auth-engine", engine.name);
      await page.fill("#auth-token", engine.tokens.viewer);
      const op = page.locator("#get_engine_status");
      await op.locator(":scope > summary").click();
      await op.locator("button.send").click();
      await page.waitForFunction(() => document.querySelector("#get_engine_status .result")?.getAttribute("data-status") === "200");
      expect(await op.locator(".result").textContent()).toContain('"engine_status": "ENGINE.OFFLINE"');

      // A body route: the form is prefilled from the schema; a viewer gets the documented 403.
      const reg = page.locator("#register_episode");
      await reg.locator(":scope > summary").click();
      expect(JSON.parse(await reg.locator("textarea").inputValue())).toEqual({ episode_uuid: "example" });
      await reg.locator("button.send").click();
      await page.waitForFunction(() => document.querySelector("#register_episode .result")?.getAttribute("data-status") === "403");
      // The 403 is the answer the test asked for; Chromium logs it as a failed resource load.
      expect(errors.filter((e) => !e.includes("403"))).toEqual([]);
    } finally {
      await browser.close();
    }
  });
});
