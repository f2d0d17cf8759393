/**
 * An engine's recorded calls and their R2 bodies, for tests of retention and deletes: one call
 * recorded through a live claim, the engine's body keys, and an engine whose only call's row
 * retention has removed while its body object stays (rows go first, whole days later).
 */
import { env } from "cloudflare:workers";
import { expect } from "vitest";
import { LedgerClient } from "../../src/client";
import { advance, claimKeyFields, createEngine, ORIGIN, rollingWith, withGateway, workerFetch, type TestEngine } from "./harness";
import { batchOf, callRecord, postCalls } from "./ledger";

export const DAY = 86_400_000;
export const HOUR = 3_600_000;

/** The R2 keys of every body stored under the engine's name, whatever its incarnation. */
export const ledgerKeys = async (engine: string): Promise<string[]> => (await env.LEDGER.list({ prefix: `ledger/${encodeURIComponent(engine)}/` })).objects.map((o) => o.key);

/** One relayed call of a new claim by `client`, recorded (admitted at `admittedAt`, else now). */
export async function recordOne(e: TestEngine, client: string, admittedAt?: number): Promise<void> {
  const claimed = await e.as("client").claimEpisode({ client_uuid: client, discard_episode_timeout: 600 });
  const key = await claimKeyFields(claimed.openai_api_key);
  expect((await e.stub.relayBegin(key)).ok).toBe(true);
  const call = callRecord({ episode: key.episode_uuid, fence: key.fence, client }, { ...(admittedAt === undefined ? {} : { admitted_at: admittedAt }), body: { messages: [{ role: "user", content: "hi" }] } });
  expect((await postCalls(e, batchOf([call]))).status).toBe(200);
}

/**
 * An engine (named from `prefix`) with retention_days 1 whose one call's row retention has
 * removed, its body object still there: the engine's clock is set so the cutoff falls after the
 * call and on its object's day, whenever the test runs (the Worker's real clock names the days).
 * Returns the object's keys.
 */
export async function engineWithRowRetainedObject(prefix: string): Promise<{ e: TestEngine; keys: string[] }> {
  const e = await createEngine(prefix);
  // Retention sweeps an hour after the first call with capture on; the engine's clock about a day
  // (its retention) ahead of the Worker's real one.
  e.clock.t = Date.now() + DAY - 2 * HOUR;
  await rollingWith(e, 1);
  await new LedgerClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens.operator, fetch: workerFetch }).configure({ retention_days: 1 });
  await withGateway(e);
  const admittedAt = Date.now() - 10_000;
  await recordOne(e, "c1", admittedAt);
  const keys = await ledgerKeys(e.name);
  expect(keys).toHaveLength(1);
  const objectDay = Date.parse(keys[0]?.split("/")[3] ?? "");
  e.clock.t = Math.max(admittedAt, objectDay) + 1 + DAY;
  await advance(e, 0);
  expect((await env.DB.prepare("SELECT COUNT(*) AS n FROM llm_calls WHERE engine = ?").bind(e.name).first<{ n: number }>())?.n).toBe(0);
  expect(await ledgerKeys(e.name)).toEqual(keys);
  return { e, keys };
}
