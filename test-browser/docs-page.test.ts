/**
 * /docs in a real Chromium: it lists every operation of /openapi.json once (the token-in-URL
 * twins are described in its intro, not listed again), and its try-it form sends real requests
 * to the exchange and shows their answers, a relay route's with the claim key it is given.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, startExchange, type TestExchange } from "./support/exchange";
import { launchBrowser, watchErrors } from "./support/browser";
import { callClock, record } from "./support/scripted-ledger";

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

      // A relay route takes a claim's key, not the engine token: the key the form is given is
      // the one sent. A live claim of an engine with no gateway gets the documented 503 no_gateway
      // (the engine token would have been refused 401).
      const trainer = engine.as("trainer");
      await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 0 });
      await trainer.registerEpisode({ episode_uuid: "ep-docs", openai_api_key: "sk-ajet-docs" });
      const claim = await engine.as("client").claimEpisode({ client_uuid: "c-docs", discard_episode_timeout: 60 });
      const relay = page.locator("#relay_models__engine");
      await relay.locator(":scope > summary").click();
      await relay.locator("input[name=claim-key]").fill(claim.openai_api_key);
      await relay.locator("button.send").click();
      await page.waitForFunction(() => document.querySelector("#relay_models__engine .result")?.getAttribute("data-status") === "503");
      expect(await relay.locator(".result").textContent()).toContain('"code": "no_gateway"');
      // A header parameter is sent as a header: If-None-Match `*` on a trajectory the engine holds is 304.
      await record(ex, engine, [callClock(Date.now())({ episode: "ep-docs", fence: claim.fence ?? 0, client: "c-docs" }, { body: { messages: [{ role: "user", content: "hi" }] } })]);
      const one = page.locator("#ledger_get_trajectories_episode_uuid");
      await one.locator(":scope > summary").click();
      await one.locator("input[name=episode_uuid]").fill("ep-docs");
      await one.locator('input[name="If-None-Match"]').fill("*");
      await one.locator("button.send").click();
      await page.waitForFunction(() => document.querySelector("#ledger_get_trajectories_episode_uuid .result")?.getAttribute("data-status") === "304");
      // The 403 and the 503 are the answers the test asked for; Chromium logs them as failed resource loads.
      expect(errors.filter((e) => !e.includes("403") && !e.includes("503"))).toEqual([]);
    } finally {
      await browser.close();
    }
  });
});
