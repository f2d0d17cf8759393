/**
 * A stalled engine on the dashboard's status card, in a real Chromium against the real Worker:
 * how long the engine has held its status (a sync or a boot that never ends, in red past its
 * bound), the records waiting for D1 with D1's error (in red once they wait or a flush
 * failed), which otherwise show only as history that stopped growing, and relayed calls that
 * failed, which otherwise read as calls served.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import type { EngineOverview } from "../src/protocol/agent";
import { createEngine, startExchange, type TestEngine, type TestExchange } from "./support/exchange";
import { launchBrowser, watchErrors, type TestBrowser } from "./support/browser";
import { attr, refreshesLater } from "./support/page-data";

let ex: TestExchange;
let browser: TestBrowser;
let syncing: TestEngine;
let booting: TestEngine;

beforeAll(async () => {
  ex = await startExchange();
  syncing = await createEngine(ex, "hung-sync");
  expect(await syncing.as("operator").configureSync({ max_sync_seconds: 3600 })).toMatchObject({ max_sync_seconds: 3600 });
  await syncing.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 0 });
  await syncing.as("trainer").updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
  booting = await createEngine(ex, "slow-boot");
  await booting.as("operator").syncTrainConfig("a: 1\n");
  await booting.as("operator").startEngine();
  browser = await launchBrowser();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await ex?.stop();
});

/** The page's clock says `t` (ms): the engine's real start of its status plus the time to show. */
async function showAt(page: Page, t: number): Promise<void> {
  await page.clock.setFixedTime(t);
  await refreshesLater(page);
}

const since = async (page: Page) => ({
  text: await page.textContent("#engine-status-since"),
  cls: await page.getAttribute("#engine-status-since", "class"),
  long: await attr(page, "#engine-status-since", "data-long"),
});

async function open(e: TestEngine): Promise<{ page: Page; errors: string[]; ov: EngineOverview }> {
  const ov = await e.as("viewer").overview();
  const page = await browser.newPage();
  const errors = watchErrors(page);
  await page.clock.setFixedTime(ov.engine_status_since ?? 0);
  await page.goto(`${ex.url}/dashboard?engine=${e.name}&token=${e.tokens.viewer}&refresh=0.3`);
  await page.waitForSelector("#engine-status-since");
  return { page, errors, ov };
}

describe("how long the engine has held its status", () => {
  // Each status shown just under its bound, then just over it: grey, then red.
  const cases = [
    { what: "how long a weight sync has lasted, in red past max_sync_seconds (an hour here)", engine: () => syncing, status: "ENGINE.WEIGHT_SYNCING", under: [30, "for 30 min 0 s"], over: [62, "for 1 h 2 min"] },
    { what: "how long a boot has lasted, in red past ten minutes", engine: () => booting, status: "ENGINE.BOOTING", under: [9, "for 9 min 0 s"], over: [11, "for 11 min 0 s"] },
  ] as const;

  it.each(cases)("shows next to the badge $what", async ({ engine, status, under, over }) => {
    const { page, errors, ov } = await open(engine());
    expect(ov.engine_status).toBe(status);
    const t0 = ov.engine_status_since ?? 0;
    expect(Number(await attr(page, "#engine-status-since", "data-since"))).toBe(t0);
    await showAt(page, t0 + under[0] * 60_000);
    expect(await since(page)).toEqual({ text: under[1], cls: "since", long: "false" });
    await showAt(page, t0 + over[0] * 60_000);
    expect(await since(page)).toEqual({ text: over[1], cls: "since long", long: "true" });
    expect(errors).toEqual([]);
    await page.close();
  });
});

describe("the records waiting for D1", () => {
  it("says nothing waits while D1 takes them, and shows the backlog's age and D1's error in red when it does not", async () => {
    const { page, errors, ov } = await open(syncing);
    expect(ov.outbox).toEqual({ rows: 0, oldest_at: null, last_error: null, last_error_at: null });
    expect(await page.textContent("#engine-outbox")).toBe("nothing waiting for D1");
    expect(await page.getAttribute("#engine-outbox", "class")).toBe("sub outbox");

    // The local D1 cannot be made unreachable from here (test/results.test.ts fails it inside
    // the engine): the engine's real overview goes to the page with the outbox of an outage.
    const t = (ov.engine_status_since ?? 0) + 3_600_000;
    const D1_ERROR = `D1 could not be reached (its words are in the Worker's log: "writing the outbox to D1 failed")`;
    await page.route(/\/e\/hung-sync\/overview$/, async (route) => {
      const real = (await (await route.fetch()).json()) as EngineOverview;
      await route.fulfill({ json: { ...real, outbox: { rows: 3, oldest_at: t - 600_000, last_error: D1_ERROR, last_error_at: t - 5_000 } } });
    });
    await showAt(page, t);
    await page.waitForSelector("#engine-outbox.stuck");
    expect(await page.textContent("#engine-outbox")).toBe(`3 records waiting for D1 for 10 min 0 s: D1 failed 5.0 s ago: ${D1_ERROR}`);
    expect(await attr(page, "#engine-outbox", "data-last-error")).toBe(D1_ERROR);

    // A backlog older than a minute is shown in red though no flush failed yet.
    await page.unroute(/\/e\/hung-sync\/overview$/);
    await page.route(/\/e\/hung-sync\/overview$/, async (route) => {
      const real = (await (await route.fetch()).json()) as EngineOverview;
      await route.fulfill({ json: { ...real, outbox: { rows: 2, oldest_at: t - 90_000, last_error: null, last_error_at: null } } });
    });
    await refreshesLater(page, 2);
    expect(await page.textContent("#engine-outbox")).toBe("2 records waiting for D1 for 1 min 30 s");
    expect(await page.getAttribute("#engine-outbox", "class")).toBe("sub outbox stuck");
    expect(errors).toEqual([]);
    // A refresh's route may be mid-fetch as the page closes: its response would be disposed under it.
    await page.unrouteAll({ behavior: "ignoreErrors" });
    await page.close();
  });
});

describe("the relayed calls that failed", () => {
  it("counts them by kind beside the calls relayed, in red with the latest's words while recent", async () => {
    const e = await createEngine(ex, "dead-gateway");
    const trainer = e.as("trainer");
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 0 });
    await trainer.registerEpisode({ episode_uuid: "ep-1", openai_base_url: "http://trainer.internal:8000/v1", openai_api_key: "sk-trainer" });
    // A gateway that nothing listens on: every call gets 502 gateway_unreachable.
    await trainer.heartbeat({ agent_id: "a", host: "gpu", pid: 1, trainer: { state: "running", pid: 2, started_at: null }, gateway_url: "http://127.0.0.1:9" });
    const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 600 });
    for (let i = 0; i < 2; i++) {
      const r = await fetch(`${ex.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${c.openai_api_key}`, "content-type": "application/json" }, body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }) });
      expect(r.status).toBe(502);
    }
    let ov = await e.as("viewer").overview();
    for (let i = 0; i < 50 && ov.relay.last_failure === null; i++) {
      await new Promise((r) => setTimeout(r, 100));
      ov = await e.as("viewer").overview();
    }
    expect(ov.relay).toMatchObject({ calls: 2, failures: { "502 gateway_unreachable": 2 } });
    const last = ov.relay.last_failure;
    if (last === null) throw new Error("no failure reached the engine");
    const page = await browser.newPage();
    const errors = watchErrors(page);
    await page.clock.setFixedTime(last.at + 5_000);
    await page.goto(`${ex.url}/dashboard?engine=${e.name}&token=${e.tokens.viewer}&refresh=0.3`);
    await page.waitForSelector("#relay-calls");
    expect(await page.textContent("#relay-calls")).toBe(`LLM calls relayed: 2 · 2 failed (502 gateway_unreachable × 2); the latest 5.0 s ago: ${last.message}`);
    expect(await page.getAttribute("#relay-calls", "class")).toBe("sub relay failing");
    // Ten minutes without a failure: the counts stay, no longer in red.
    await showAt(page, last.at + 600_000);
    expect(await page.getAttribute("#relay-calls", "class")).toBe("sub relay");
    expect(errors).toEqual([]);
    await page.close();
  });
});

describe("the calls the agent recorded", () => {
  it("says how many were stored and wait on the host, and in red how many were lost on the way, as the agent's heartbeat counts them", async () => {
    const e = await createEngine(ex, "host-ledger");
    const trainer = e.as("trainer");
    const agent = { agent_id: "a", host: "gpu", pid: 1, trainer: { state: "running" as const, pid: 2, started_at: null } };
    const ledger = { queued_calls: 12, queued_bytes: 40_960, oldest_queued_ms: 1_500, sent_calls: 3_400, duplicate_calls: 2, dropped_calls: 0, refused_calls: 0, unrecorded_calls: 0 };
    await trainer.heartbeat({ ...agent, ledger });
    const page = await browser.newPage();
    const errors = watchErrors(page);
    await page.goto(`${ex.url}/dashboard?engine=${e.name}&token=${e.tokens.viewer}&refresh=0.3`);
    await page.waitForSelector("#host-ledger");
    expect(await page.textContent("#host-ledger")).toBe("LLM calls recorded on the host: 3402 stored · 12 waiting (40 KiB, the oldest for 1.50 s)");
    expect(await page.getAttribute("#host-ledger", "class")).toBe("sub host-ledger");

    await trainer.heartbeat({ ...agent, ledger: { ...ledger, queued_calls: 0, queued_bytes: 0, oldest_queued_ms: null, dropped_calls: 5, unrecorded_calls: 1 } });
    await page.waitForSelector('#host-ledger[data-lost="6"]', { timeout: 10_000 });
    expect(await page.textContent("#host-ledger")).toBe("LLM calls recorded on the host: 3402 stored · 6 lost (dropped 5, unrecorded 1: the agent's log says why)");
    expect(await page.getAttribute("#host-ledger", "class")).toBe("sub host-ledger lost");

    // An agent that recorded nothing yet says nothing.
    await trainer.heartbeat({ ...agent, ledger: { queued_calls: 0, queued_bytes: 0, oldest_queued_ms: null, sent_calls: 0, duplicate_calls: 0, dropped_calls: 0, refused_calls: 0, unrecorded_calls: 0 } });
    await page.waitForSelector("#host-ledger", { state: "detached", timeout: 10_000 });
    expect(errors).toEqual([]);
    await page.close();
  });
});
