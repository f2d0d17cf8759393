/**
 * An engine deleted and made again under the same name while the dashboard (admin token) has one
 * of its episodes open, in a real Chromium against the real Worker: the page refreshes the open
 * episode, ended too, and no longer shows one the exchange does not have.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, createEngine, startExchange, type TestEngine, type TestExchange } from "./support/exchange";
import { launchBrowser, type TestBrowser } from "./support/browser";
import { refreshesLater } from "./support/page-data";
import { threeTurns } from "../test/support/ledger-calls";
import { callClock, claim, end, ledgerOf, record, settled } from "./support/scripted-ledger";

let ex: TestExchange;
let browser: TestBrowser;
let engine: TestEngine;

beforeAll(async () => {
  ex = await startExchange();
  browser = await launchBrowser();
  engine = await createEngine(ex, "again");
  await ledgerOf(ex, engine, "operator").configure({ capture: "messages", retention_days: 7 });
  await engine.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
  const c = await claim(engine, "ep-old", "client-a", "calc");
  await record(ex, engine, threeTurns(c, callClock(Date.now() - 60_000)));
  await end(engine, c, "calc", 1);
  await settled(ledgerOf(ex, engine, "viewer"), 1);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await ex?.stop();
});

describe("an open episode of an engine deleted and made again", () => {
  it("is not shown as the new engine's once the exchange no longer has it", async () => {
    // An ended episode was read once: the page went on drawing the deleted engine's episode under
    // the new one, although the exchange answered 404 for it and the list beside it was empty.
    const page = await browser.newPage();
    await page.goto(`${ex.url}/dashboard?engine=again&token=${ADMIN_TOKEN}&refresh=0.3&episode=ep-old`);
    await page.waitForSelector('#episode-view[data-episode="ep-old"]');

    await ex.admin.deleteEngine("again", { force: true });
    const fresh = await createEngine(ex, "again");
    // The exchange no longer has the episode under this engine.
    const res = await fetch(`${ex.url}/e/again/trajectories/ep-old`, { headers: { authorization: `Bearer ${fresh.tokens.viewer}` } });
    expect(res.status).toBe(404);
    await refreshesLater(page, 4);
    await page.waitForSelector("#trajectories-empty");

    expect(await page.locator('#episode-view[data-episode="ep-old"]').count()).toBe(0);
  });
});
