/**
 * The engine-wide bound on its Durable Object's store (engine/storage-guard.ts): above its
 * high-water bound, requests that add data are refused 503 storage_full and change nothing,
 * while those that free space go on; once space is freed, writes resume. Tests set a bound a
 * few MB above an engine's own size, as they set its clock.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ExchangeError } from "../src/client";
import type { EngineObject } from "../src/engine/engine-object";
import { highWaterFrom } from "../src/engine/storage-guard";
import { DO_MAX_DATABASE_BYTES, formatBytes } from "../src/protocol/limits";
import { DEFAULT_STORAGE_HIGH_WATER_BYTES } from "../src/protocol/storage";
import { atropos, ENV, group, running } from "./support/atropos";
import { advance, createEngine, endBody, raw, rollingWith, type TestEngine } from "./support/harness";

const MB = 1_000_000;
const dbSize = (e: TestEngine) => runInDurableObject(e.stub, (_i, state) => state.storage.sql.databaseSize);
const setBound = (e: TestEngine, bytes: number) =>
  runInDurableObject(e.stub, (instance: EngineObject) => {
    instance.storageHighWater = bytes;
  });
const count = (e: TestEngine, table: string) => runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM ${table}`).one().n);
/** A worker's row of about 400 KB: stored twice (its row and its outbox record) until D1 takes it. */
const bigRow = (session: string, index: number, done = false) => ({
  session_id: session,
  group_id: `g-${session}`,
  step_index: index,
  messages: [{ role: "user", content: "x".repeat(400_000) }],
  response: "",
  reward: 1,
  is_session_completed: done,
});
const post = (e: TestEngine, rows: unknown[]) => raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify({ steps: rows }) });

async function refusal<T>(p: Promise<T>): Promise<ExchangeError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof ExchangeError) return err;
    throw err;
  }
  throw new Error("expected a refusal");
}

describe("the engine's storage high-water bound", () => {
  it("refuses what adds data above the bound with a 503 that changes nothing, lets what frees space through, and takes writes again once space is freed", async () => {
    const e = await createEngine("store");
    const trainer = e.as("trainer");
    const client = e.as("client");
    await trainer.startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
    await rollingWith(e, 3);
    await running(e);
    const claimed = await client.claimEpisode({ client_uuid: "c1", discard_episode_timeout: 600 });
    const bound = (await dbSize(e)) + 3 * MB;
    await setBound(e, bound);

    // Rows of 400 KB (800 KB with their outbox records) until the store passes its bound.
    let sent = 0;
    for (; sent < 10; sent++) {
      const r = await post(e, [bigRow(`s${sent}`, 0)]);
      if (r.status !== 200) break;
    }
    expect(sent).toBeGreaterThanOrEqual(3);
    expect(sent).toBeLessThan(10);
    const used = await dbSize(e);
    expect(used).toBeGreaterThan(bound);
    const overview = await e.as("viewer").overview();
    expect(overview.storage).toEqual({ used_bytes: used, high_water_bytes: bound, max_bytes: DO_MAX_DATABASE_BYTES });

    const refused = await post(e, [bigRow("late", 0)]);
    expect(refused.status).toBe(503);
    expect(refused.json).toMatchObject({ error: "storage_full" });
    expect(String(refused.json?.["detail"])).toContain(formatBytes(bound));
    expect(String(refused.json?.["detail"])).toContain(formatBytes(used));
    const header = await e.as("client").postSteps({ steps: [bigRow("late", 0)] }).catch((err: unknown) => err);
    expect(header).toBeInstanceOf(ExchangeError);
    expect((header as ExchangeError).retryAfterSeconds).toBe(30);

    // Everything that adds data is refused, and stores nothing.
    const steps = await count(e, "buf_steps");
    const outbox = await count(e, "outbox");
    expect((await refusal(trainer.registerEpisode({ episode_uuid: "more", openai_base_url: "http://t/v1", openai_api_key: "k", zmq_listen_result_addr: "" }))).code).toBe("storage_full");
    expect((await refusal(client.endEpisode(endBody("c1", claimed.episode_uuid, 1)))).code).toBe("storage_full");
    expect((await refusal(client.abortEpisode({ ...endBody("c1", claimed.episode_uuid, 1) }))).code).toBe("storage_full");
    const scored = await atropos(e, "client", "POST", "/scored_data", group(1, 2));
    expect([scored.status, scored.json.error, scored.headers.get("retry-after")]).toEqual([503, "storage_full", "30"]);
    const env2 = await atropos(e, "client", "POST", "/register-env", ENV);
    expect([env2.status, env2.json.error]).toEqual([503, "storage_full"]);
    expect(await count(e, "buf_steps")).toBe(steps);
    expect(await count(e, "outbox")).toBe(outbox);
    expect(await count(e, "atropos_groups")).toBe(0);
    expect(await count(e, "atropos_envs")).toBe(1);
    const still = await e.as("viewer").overview();
    expect(still.episodes).toEqual(overview.episodes);

    // What frees space, or adds none, goes on: a claim, a pull, an Atropos batch, the status.
    expect((await client.claimEpisode({ client_uuid: "c2", discard_episode_timeout: 600 })).success).toBe(true);
    expect((await trainer.getRolloutData()).success).toBe(false);
    expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ batch: null });
    expect((await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 })).success).toBe(true);

    // D1 takes the outbox: its records of the rows go, and the store is below its bound again.
    await advance(e, 1_000);
    expect(await count(e, "outbox")).toBe(0);
    expect(await dbSize(e)).toBeLessThan(bound);
    expect((await client.endEpisode(endBody("c1", claimed.episode_uuid, 1))).success).toBe(true);
    expect((await post(e, [bigRow("late", 0)])).status).toBe(200);
    expect((await atropos(e, "client", "POST", "/scored_data", group(1, 2))).json).toEqual({ status: "received" });
  }, 60_000);

  it("counts the pages in use, not the free pages deletes leave in the file", async () => {
    const e = await createEngine("store");
    await runInDurableObject(e.stub, (_i, state) => {
      const sql = state.storage.sql;
      // Only page_size is let through to the object's code; page_count and freelist_count are refused, which is why databaseSize is the figure.
      const pageSize = sql.exec<{ page_size: number }>("PRAGMA page_size").one().page_size;
      expect(() => sql.exec("PRAGMA page_count").toArray()).toThrow(/SQLITE_AUTH/);
      expect(() => sql.exec("PRAGMA freelist_count").toArray()).toThrow(/SQLITE_AUTH/);
      const empty = sql.databaseSize;
      expect(empty % pageSize).toBe(0);
      sql.exec("CREATE TABLE filler (v TEXT)");
      for (let i = 0; i < 10; i++) sql.exec("INSERT INTO filler VALUES (?)", "x".repeat(500_000));
      const filled = sql.databaseSize;
      // 5,000,000 bytes of text, in overflow pages of about a page each: at most a page of slack per row and per table.
      expect(filled % pageSize).toBe(0);
      expect(filled - empty).toBeGreaterThanOrEqual(5_000_000);
      expect(filled - empty).toBeLessThan(5_000_000 + 20 * pageSize + (5_000_000 / pageSize) * 8);
      sql.exec("DELETE FROM filler");
      // The file keeps those pages as free ones; the figure counts them no more.
      expect(sql.databaseSize - empty).toBeLessThanOrEqual(2 * pageSize);
      sql.exec("DROP TABLE filler");
    });
    const overview = await e.as("viewer").overview();
    expect(overview.storage.used_bytes).toBe(await dbSize(e));
    expect(overview.storage.high_water_bytes).toBe(DEFAULT_STORAGE_HIGH_WATER_BYTES);
  });

  it("takes its bound from STORAGE_HIGH_WATER_BYTES, 9 GiB by default, and ignores a value that is no number of bytes below 10 GB", () => {
    expect(DEFAULT_STORAGE_HIGH_WATER_BYTES).toBe(9 * 1024 ** 3);
    expect(highWaterFrom(undefined)).toBe(DEFAULT_STORAGE_HIGH_WATER_BYTES);
    expect(highWaterFrom("")).toBe(DEFAULT_STORAGE_HIGH_WATER_BYTES);
    expect(highWaterFrom("5000000")).toBe(5_000_000);
    for (const bad of ["-1", "0", "1000", "5e9x", "9.5", String(DO_MAX_DATABASE_BYTES), "1e12", "abc"]) expect(highWaterFrom(bad), bad).toBe(DEFAULT_STORAGE_HIGH_WATER_BYTES);
    expect(env.STORAGE_HIGH_WATER_BYTES).toBeUndefined();
  });
});
