/**
 * An alarm is one invocation, and D1 takes at most 1,000 statements from one: the outbox's flush,
 * the gathering of ended claims' calls and the retention sweep spend one budget between them
 * (EngineObject.alarm), what one leaves the next may use, and what none has room for waits for
 * the next alarm. The budget is lowered here to see it kept with a small load; each statement the
 * alarm sends to the real D1 is counted on its way.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { EngineObject } from "../src/engine/engine-object";
import type { EngineEnv } from "../src/engine/engine-env";
import { SETTLE_MS } from "../src/engine/ledger-compactions";
import { callRecord, groupOfClaims, postCalls } from "./support/ledger";
import { sys, user } from "./support/ledger-calls";
import { advance, endBody, engineStats, withGateway, type TestEngine } from "./support/harness";
import { watchedD1 } from "./support/watched-d1";

/** A D1 database that counts the statements sent through it: each run, all, first or raw one, each of a batch, each exec. */
class CountingD1 {
  sent = 0;
  readonly database = watchedD1({ running: () => void this.sent++ }, env.DB);
}

/** Gives the engine's object `budget` statements an alarm and a D1 that counts what it is sent. */
async function countedAlarms(e: TestEngine, budget: number): Promise<CountingD1> {
  const counter = new CountingD1();
  await runInDurableObject(e.stub, (instance: EngineObject) => {
    instance.d1QueriesPerAlarm = budget;
    const host = instance as unknown as { env: EngineEnv };
    const own = host.env;
    const DB = counter.database;
    host.env = new Proxy(own, { get: (target, key) => (key === "DB" ? DB : Reflect.get(target, key)) });
  });
  return counter;
}

const waiting = (e: TestEngine) => runInDurableObject(e.stub, (_i, s) => s.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM ledger_compactions").one().n);
const calls = async (e: TestEngine) => (await env.DB.prepare("SELECT COUNT(*) AS n FROM llm_calls WHERE engine = ?").bind(e.name).first<{ n: number }>())?.n ?? 0;
const objectsOf = async (e: TestEngine, c: { episode: string; fence: number }) =>
  new Set((await env.DB.prepare("SELECT body_key FROM llm_calls WHERE engine = ? AND episode_uuid = ? AND fence = ?").bind(e.name, c.episode, c.fence).all<{ body_key: string }>()).results.map((r) => r.body_key)).size;

describe("an alarm's D1 statements", () => {
  it("stay within one budget for the outbox, the gathering and the sweep; what has no room waits for the next alarm", async () => {
    const { e, claims, keys } = await groupOfClaims("alarm-budget", 6);
    // A relayed call with capture on: the ledger is swept from now on.
    await withGateway(e);
    expect((await e.stub.relayBegin(keys[0]!)).ok).toBe(true);
    // 210 calls a claim in three batches: each claim's rows in three objects, moved in two statements.
    for (let b = 0; b < 3; b++) {
      const calls = claims.flatMap((c) => Array.from({ length: 70 }, () => callRecord(c, { body: { messages: [sys, user], answer: { role: "assistant", content: "4" } } })));
      expect((await postCalls(e, { batch_id: `budget-${b}`, calls })).status).toBe(200);
    }
    for (const c of claims) expect((await e.as("client").endEpisode(endBody(c.client, c.episode, 1))).success).toBe(true);
    for (const c of claims) expect(await objectsOf(e, c)).toBe(3);

    // Room for the outbox's flush and the gathering of two claims at most (a read, then two statements each).
    const budget = 8;
    const counter = await countedAlarms(e, budget);
    const perAlarm: number[] = [];
    await advance(e, SETTLE_MS);
    perAlarm.push(counter.sent);
    for (let i = 0; i < 10 && ((await waiting(e)) > 0 || (await engineStats(e)).outbox > 0); i++) {
      counter.sent = 0;
      await advance(e, 1);
      perAlarm.push(counter.sent);
    }
    for (const n of perAlarm) expect(n).toBeLessThanOrEqual(budget);
    // Six claims' 13 statements and the ends' outbox rows could not go in one alarm; each alarm sent some.
    expect(perAlarm.length).toBeGreaterThanOrEqual(3);
    expect(perAlarm.every((n) => n > 0)).toBe(true);
    expect(await waiting(e)).toBe(0);
    expect((await engineStats(e)).outbox).toBe(0);
    for (const c of claims) expect(await objectsOf(e, c)).toBe(1);

    // A month on, every call is past the ledger's 30 days: the sweep deletes their rows and objects within what an alarm may send.
    const sweeping = await countedAlarms(e, 5);
    const swept: number[] = [];
    await advance(e, 31 * 86_400_000);
    swept.push(sweeping.sent);
    const left = async () => (await calls(e)) + (await env.LEDGER.list({ prefix: `ledger/${e.name}/` })).objects.length;
    for (let i = 0; i < 10 && (await left()) > 0; i++) {
      sweeping.sent = 0;
      await advance(e, 60_000);
      swept.push(sweeping.sent);
    }
    for (const n of swept) expect(n).toBeLessThanOrEqual(5);
    expect(swept.length).toBeGreaterThanOrEqual(2);
    expect(await left()).toBe(0);
  });
});
