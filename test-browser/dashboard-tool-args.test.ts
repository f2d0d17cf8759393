/**
 * A tool call's arguments as the episode view shows them, in a real Chromium against the real
 * Worker. The model's arguments arrive as a JSON string; the page shows it indented, its tokens
 * as the model wrote them (parsed and written again, integers past 2^53 came out rounded).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, startExchange, type TestEngine, type TestExchange } from "./support/exchange";
import { launchBrowser, watchErrors, type TestBrowser } from "./support/browser";
import { sys, user } from "../test/support/ledger-calls";
import { callClock, claim, end, ledgerOf, record, settled } from "./support/scripted-ledger";

let ex: TestExchange;
let browser: TestBrowser;
let engine: TestEngine;
const ARGS = '{"order_id": 9007199254740993, "account": 12345678901234567890, "items": [{"sku": "a,b:[c]", "n": 1.0}], "notes": {}, "tags": [ ]}';

beforeAll(async () => {
  ex = await startExchange();
  browser = await launchBrowser();
  engine = await createEngine(ex, "tool-args");
  await ledgerOf(ex, engine, "operator").configure({ capture: "messages", retention_days: 7 });
  await engine.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
  const call = callClock(Date.now() - 60_000);
  const c = await claim(engine, "ep-big-ids", "client-a", "orders");
  const answer = { role: "assistant", content: null, tool_calls: [{ id: "t1", type: "function", function: { name: "refund", arguments: ARGS } }] };
  await record(ex, engine, [call(c, { body: { messages: [sys, user], answer } })]);
  await end(engine, c, "orders", 1);
  await settled(ledgerOf(ex, engine, "viewer"), 1);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await ex?.stop();
});

describe("a tool call's arguments in the episode view", () => {
  it("shows them indented, with the integers the model sent digit for digit", async () => {
    const t = await ledgerOf(ex, engine, "viewer").trajectory("ep-big-ids");
    expect(JSON.stringify(t.calls[0]?.answer)).toContain("9007199254740993"); // the exchange holds it exactly
    const page = await browser.newPage();
    const errors = watchErrors(page);
    await page.goto(`${ex.url}/dashboard?engine=${engine.name}&token=${engine.tokens.viewer}&episode=ep-big-ids`);
    await page.waitForSelector('#episode-messages .tool-call[data-tool="refund"]');
    const shown = (await page.textContent('#episode-messages .tool-call[data-tool="refund"] .tool-args')) ?? "";
    expect(shown).toBe(
      ["{", '  "order_id": 9007199254740993,', '  "account": 12345678901234567890,', '  "items": [', "    {", '      "sku": "a,b:[c]",', '      "n": 1.0', "    }", "  ],", '  "notes": {},', '  "tags": []', "}"].join("\n"),
    );
    expect(errors).toEqual([]);
  });
});
