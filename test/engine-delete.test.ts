/**
 * DELETE /admin/engines/<name> through the real Worker, D1 and Durable Objects: what goes (the
 * object's state, its tokens, every D1 row of the engine) and what stays with keep_history; the
 * refusal while the agent is connected; routes, open long-polls and per-claim keys answering 404
 * afterwards; the name made again from nothing; a big engine deleted over several requests; its
 * call bodies in R2, every one of its incarnation's; a delete in the middle of claims, ends,
 * registrations and outbox flushes, of the alarm's retention sweep, and of another delete.
 * The histories kept under archive names: listed, and deleted the same bounded way.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { getTableColumns, getTableName, is } from "drizzle-orm";
import { SQLiteTable } from "drizzle-orm/sqlite-core";
import { describe, expect, it, vi } from "vitest";
import * as schema from "../src/db/schema";
import type { EngineObject } from "../src/engine/engine-object";
import { admin, advance, ADMIN_TOKEN, claimKeyFields, createEngine, endBody, engineStats, ORIGIN, raw, rollingWith, uniqueName, withGateway, workerFetch, type TestEngine } from "./support/harness";
import { fixRunsClock, refusal, runsAs, sampleCatalog } from "./support/runs";
import { batchOf, callRecord, postCalls } from "./support/ledger";
import { DAY, engineWithRowRetainedObject, HOUR, ledgerKeys, recordOne } from "./support/ledger-retention";
import { hashToken, newTokenId, newTokenSecret } from "../src/auth/tokens";
import { placedEngineStub } from "../src/http/engine-stub";
import { INCARNATION_NAMES_SQL } from "../src/http/engine-rows";
import { DeleteArchiveResponse } from "../src/protocol/admin";
import { LedgerClient } from "../src/client";
import { namePrefix } from "../src/ledger/keys";
import { recordCalls } from "../src/ledger/ingest";
import { SWEEP_EVERY_MS } from "../src/engine/retention-schedule";

const tables = (Object.values(schema) as unknown[]).filter((t): t is SQLiteTable => is(t, SQLiteTable));
/** Every D1 table that holds rows of an engine by name, and those that hold rows of its runs. */
const ENGINE_TABLES = tables.filter((t) => "engine" in getTableColumns(t)).map(getTableName);
const RUN_TABLES = tables.filter((t) => "runId" in getTableColumns(t)).map(getTableName);
const HISTORY_TABLES: string[] = ["trajectories", "llm_calls", "reward_history", "runs", "inference_tests"];

async function count(sql: string, ...args: unknown[]): Promise<number> {
  return (await env.DB.prepare(sql).bind(...args).first<{ n: number }>())?.n ?? -1;
}

/** Rows of `engine` in every table, and of the runs `runIds` in their child tables. */
async function d1Rows(engine: string, runIds: string[]): Promise<Record<string, number>> {
  const out: Record<string, number> = { engines: await count("SELECT COUNT(*) AS n FROM engines WHERE name = ?", engine) };
  for (const t of ENGINE_TABLES) out[t] = await count(`SELECT COUNT(*) AS n FROM ${t} WHERE engine = ?`, engine);
  for (const t of RUN_TABLES) out[t] = await count(`SELECT COUNT(*) AS n FROM ${t} WHERE run_id IN (SELECT value FROM json_each(?))`, JSON.stringify(runIds));
  return out;
}

/** The call bodies in R2 of engines named `engine` (ledger/<engine>/<incarnation>/<day>/...). */
const ledgerObjects = async (engine: string): Promise<number> => (await ledgerKeys(engine)).length;

/** One call of a new claim of `e`'s recorded, as its gateway sends it (admitted at `admittedAt` unless told). */


const nothing = (rows: Record<string, number>) => Object.fromEntries(Object.keys(rows).map((t) => [t, 0]));

/** What the engine's object holds: rows per table (its schema version aside) and its alarm. */
function objectState(stub: DurableObjectStub<EngineObject>) {
  return runInDurableObject(stub, async (_i, state) => {
    const names = state.storage.sql.exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_cf_%'").toArray();
    const rows: Record<string, number> = {};
    for (const { name } of names) {
      const n = state.storage.sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM "${name}"${name === "kv" ? " WHERE k != 'schema_version'" : ""}`).one().n;
      if (n > 0) rows[name] = n;
    }
    return { rows, alarm: await state.storage.getAlarm() };
  });
}

/** A gate the engine's D1 waits at: `reached` is a flag to poll (not a promise the object resolves: the test's code after awaiting that would run in the object's request), `release` opens it. */
type Gate = { reached: () => boolean; release: () => void };

/** Puts `wrap(real D1, wait)` in place of the engine's D1; `wait` marks the gate reached and waits until it is released. */
async function gatedD1(e: TestEngine, wrap: (real: D1Database, wait: () => Promise<void>) => D1Database): Promise<Gate> {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let reached = false;
  const wait = async (): Promise<void> => {
    reached = true;
    await gate;
  };
  await runInDurableObject(e.stub, (instance: EngineObject) => {
    const self = instance as unknown as { env: { DB: D1Database } };
    self.env = { ...self.env, DB: wrap(self.env.DB, wait) };
  });
  return { reached: () => reached, release };
}

/** The engine's D1 as a slow network makes it: the sweep's DELETE statements wait at the gate (the real D1 runs them then). */
const slowSweeps = (e: TestEngine): Promise<Gate> =>
  gatedD1(
    e,
    (real, wait) =>
      ({
        prepare: (q: string) => {
          const stmt = real.prepare(q);
          if (!q.startsWith("DELETE FROM buffer_steps")) return stmt;
          return {
            bind: (...args: unknown[]) => ({
              run: async () => {
                await wait();
                return stmt.bind(...args).run();
              },
            }),
          };
        },
        batch: (s: D1PreparedStatement[]) => real.batch(s),
      }) as unknown as D1Database,
  );

/**
 * The engine's D1 as a stuck connection makes it for the delete's drain (its outbox batch): the
 * batch waits at the gate, then fails as D1 unreachable (`then: "fail"`) or runs on the real D1.
 */
const gatedDrain = (e: TestEngine, then: "fail" | "answer"): Promise<Gate> =>
  gatedD1(
    e,
    (real, wait) =>
      ({
        prepare: (q: string) => real.prepare(q),
        batch: async (s: D1PreparedStatement[]) => {
          await wait();
          if (then === "fail") throw new Error("D1_ERROR: Network connection lost.");
          return real.batch(s);
        },
      }) as unknown as D1Database,
  );

/**
 * An engine with a row in every D1 table, each made the way production makes it: ended
 * episodes and a finished step (trajectories, reward history, through the outbox), a pulled
 * buffer group, the runs catalog, locked fields, a selection and an edit, a run with processes,
 * events and metrics, an inference test. Answers the run's id.
 */
async function populate(e: TestEngine): Promise<string> {
  fixRunsClock();
  const [ep0, ep1] = await rollingWith(e, 2);
  const client = e.as("client");
  const trainer = e.as("trainer");
  await trainer.startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
  for (const [i, id] of [ep0!, ep1!].entries()) {
    const claimed = await client.claimEpisode({ client_uuid: `c${i}`, discard_episode_timeout: 600 });
    // One LLM call of the claim in the ledger: a row in D1, its body in R2.
    const recorded = await postCalls(e, batchOf([callRecord({ episode: id, fence: (await claimKeyFields(claimed.openai_api_key)).fence, client: `c${i}` }, { body: { messages: [{ role: "user", content: "hi" }] } })]));
    expect(recorded.status).toBe(200);
    await client.endEpisode(endBody(`c${i}`, id, 0.5 + i));
  }
  await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
  await client.postSteps({ steps: [{ session_id: "s1", group_id: "g1", step_index: 0, messages: [], response: "r", reward: 1, is_session_completed: true }] });
  await trainer.getRolloutData({ max_groups: 10 });
  await advance(e, 2_000);

  const operator = runsAs(e, "operator");
  await runsAs(e, "trainer").reportCatalog(sampleCatalog());
  await operator.setLockedFields({ set: [{ section: "env", name: "max_token_length", value: 8192 }] });
  await operator.selectEnvironment({ name: "gsm8k" });
  await operator.editConfig("group_size", 4);
  const run = await operator.startRun();
  await runsAs(e, "trainer").reportRun(run.run_id, {
    status: "running",
    processes: [{ name: "api", order: 0, state: "ready", pid: 10, command: "run-api", log_path: "/tmp/api.log" }],
    metrics: [{ index: 0, step: 1, at: 1, values: { "train/reward_mean": 0.1 } }],
  });
  await operator.startInferenceTest({ models: [{ model: "m", base_url: "http://127.0.0.1:8001/v1" }] });
  return run.run_id;
}

describe("deleting an engine", () => {
  it("removes the object's state, the tokens and every D1 row of the engine; its routes, claim keys and name are gone", async () => {
    const e = await createEngine("del");
    const runId = await populate(e);
    const before = await d1Rows(e.name, [runId]);
    // The seed is complete: a table added to the schema without a row here fails this line.
    expect(Object.entries(before).filter(([, n]) => n === 0)).toEqual([]);
    await rollingWith(e, 1, { prefix: "live" });
    const claim = await e.as("client").claimEpisode({ client_uuid: "holder", discard_episode_timeout: 600 });

    const deleted = await admin.deleteEngine(e.name);
    expect(deleted).toMatchObject({ engine: e.name, done: true, history_kept_as: null });
    expect(deleted.rows).toMatchObject({ engines: 1, tokens: 4, trajectories: 2, reward_history: 1, runs: 1, run_events: expect.any(Number) });

    expect(await d1Rows(e.name, [runId])).toEqual(nothing(before));
    expect(await ledgerObjects(e.name)).toBe(0);
    expect(await objectState(e.stub)).toEqual({ rows: {}, alarm: null });
    for (const token of [e.tokens.viewer, e.tokens.trainer, ADMIN_TOKEN]) {
      const r = await raw(`/e/${e.name}/get_engine_status`, { token });
      expect([r.status, r.json?.["error"]]).toEqual([404, "unknown_engine"]);
    }
    expect((await raw(`/e/${e.name}/t/${e.tokens.client}/claim_episode`, { body: JSON.stringify({ client_uuid: "x", discard_episode_timeout: 60 }) })).status).toBe(404);
    expect((await raw(`/e/${e.name}/runs`, { token: e.tokens.viewer })).status).toBe(404);
    const llm = await raw(`/e/${e.name}/v1/chat/completions`, { token: claim.openai_api_key, body: JSON.stringify({ model: "m", messages: [] }) });
    expect(llm.status).toBe(404);
    expect(await e.stub.relayBegin(await claimKeyFields(claim.openai_api_key))).toMatchObject({ ok: false, status: 404 });
    expect((await admin.listEngines()).engines.map((x) => x.name)).not.toContain(e.name);
    await expect(admin.listTokens(e.name)).rejects.toMatchObject({ status: 404 });
    await expect(admin.deleteEngine(e.name)).rejects.toMatchObject({ status: 404, code: "unknown_engine" });
  });

  it("keeps the history under <name>@<time> with keep_history, the results still in the outbox included", async () => {
    const e = await createEngine("keep");
    const runId = await populate(e);
    // Ended, but its row has not left the engine's outbox yet (no alarm since).
    await rollingWith(e, 1, { prefix: "last", step: 1 });
    await e.as("client").claimEpisode({ client_uuid: "late", discard_episode_timeout: 600 });
    await e.as("client").endEpisode(endBody("late", "last-0", 1));

    const r = await admin.deleteEngine(e.name, { keep_history: true });
    expect(r.history_kept_as).toMatch(new RegExp(`^${e.name}@\\d+$`));
    const archive = r.history_kept_as!;
    const left = await d1Rows(e.name, []);
    expect(left).toEqual(nothing(left));
    const kept = await d1Rows(archive, [runId]);
    for (const t of Object.keys(kept)) {
      if (HISTORY_TABLES.includes(t)) expect(kept[t], t).toBeGreaterThan(0);
      else if (RUN_TABLES.includes(t)) expect(kept[t], `${t} follows its run`).toBeGreaterThan(0);
      else expect(kept[t], t).toBe(0);
    }
    expect(kept["trajectories"]).toBe(3);
    // The calls' bodies stay where the re-filed rows point.
    expect(await ledgerObjects(e.name)).toBe(2);
    // The run the agent can no longer report on is stopped, not left running forever.
    expect(await env.DB.prepare("SELECT status, detail FROM runs WHERE id = ?").bind(runId).first()).toEqual({ status: "stopped", detail: "the engine was deleted" });

    // The name is free, and its new engine sees none of it.
    const again = await createEngine(undefined, { name: e.name });
    fixRunsClock();
    expect((await runsAs(again, "viewer").listRuns()).runs).toEqual([]);
    await runsAs(again, "trainer").reportCatalog(sampleCatalog());
    await runsAs(again, "operator").selectEnvironment({ name: "gsm8k" });
    expect((await runsAs(again, "operator").startRun()).status).toBe("pending");
  });

  it("is refused while the agent is connected, unless forced, and changes nothing then", async () => {
    const e = await createEngine("agent");
    const heartbeat = { agent_id: "a1", host: "gpu-7", pid: 1, version: "1", trainer: { state: "running" as const, pid: 2, started_at: null } };
    await e.as("trainer").heartbeat(heartbeat);
    const refused = await raw(`/admin/engines/${e.name}`, { method: "DELETE", token: ADMIN_TOKEN });
    expect(refused.status).toBe(409);
    expect(refused.json).toMatchObject({ error: "agent_connected", detail: expect.stringContaining("gpu-7") });
    expect((await e.as("viewer").overview()).agent).toMatchObject({ connected: true, host: "gpu-7" });
    expect(await count("SELECT COUNT(*) AS n FROM tokens WHERE engine = ?", e.name)).toBe(4);

    // An agent gone quiet (no heartbeat for 45 s) no longer holds the engine.
    e.clock.t += 46_000;
    expect((await admin.deleteEngine(e.name)).done).toBe(true);

    const forced = await createEngine("agent-forced");
    await forced.as("trainer").heartbeat(heartbeat);
    expect((await admin.deleteEngine(forced.name, { force: true })).done).toBe(true);
    expect((await raw(`/e/${forced.name}/overview`, { token: forced.tokens.viewer })).status).toBe(404);
  });

  it("answers the agent's open long-poll with 404", async () => {
    const e = await createEngine("poll");
    const poll = raw(`/e/${e.name}/agent/commands?wait=25`, { token: e.tokens.trainer });
    await vi.waitFor(() => runInDurableObject(e.stub, (i: EngineObject) => expect((i as unknown as { channel: { pollWaiters: Set<unknown> } }).channel.pollWaiters.size).toBe(1)));
    const started = Date.now();
    await admin.deleteEngine(e.name);
    const r = await poll;
    expect([r.status, r.json?.["error"]]).toEqual([404, "unknown_engine"]);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("lets the name be made again from nothing: new tokens, no state, fences anew, and old keys dead", async () => {
    const first = await createEngine("again");
    await rollingWith(first, 2);
    const old = await first.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 600 });
    await first.as("client").endEpisode(endBody("c", "ep-0", 1));
    await first.as("trainer").heartbeat({ agent_id: "a1", host: "gpu-1", pid: 1, version: "1", trainer: { state: "running", pid: 2, started_at: null }, gateway_url: "http://gpu-1:10087" });
    await admin.deleteEngine(first.name, { force: true });

    const again = await createEngine(undefined, { name: first.name, location_hint: "enam" });
    expect((await raw(`/e/${again.name}/get_engine_status`, { token: first.tokens.viewer })).status).toBe(401);
    expect(await again.as("viewer").getEngineStatus()).toEqual({ engine_status: "ENGINE.OFFLINE", engine_status_detail: null, global_step: null });
    expect(await again.as("viewer").overview()).toMatchObject({ engine: again.name, episodes: { registered: 0, claimed: 0, resetting: 0 }, pending_commands: 0, outbox: { rows: 0, oldest_at: null, last_error: null, last_error_at: null }, agent: { connected: false, host: null } });
    expect((await again.as("viewer").getRewardHistory()).history).toEqual([]);
    expect((await admin.listTokens(again.name)).tokens).toHaveLength(4);

    // The same episode, claimed again: its fence starts over, and the old engine's key for it does not fit.
    await rollingWith(again, 1);
    const fresh = await again.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 600 });
    expect([fresh.episode_uuid, fresh.fence]).toEqual([old.episode_uuid, old.fence]);
    await again.as("trainer").heartbeat({ agent_id: "a2", host: "gpu-2", pid: 1, version: "1", trainer: { state: "running", pid: 2, started_at: null }, gateway_url: "http://gpu-2:10087" });
    expect(await again.stub.relayBegin(await claimKeyFields(old.openai_api_key))).toMatchObject({ ok: false, status: 401, error: "claim_not_live" });
    expect(await again.stub.relayBegin(await claimKeyFields(fresh.openai_api_key))).toMatchObject({ ok: true, body: { gateway_url: "http://gpu-2:10087" } });
  });

  it("gives the engine made again under a deleted one's name a gateway secret the old engine's agent does not hold", async () => {
    const first = await createEngine("gws");
    const oldSecret = (await first.as("trainer").gatewaySecret()).secret;
    // Retired (its tokens leaked, its GPU host handed to another team, ...) and made again.
    await admin.deleteEngine(first.name, { force: true });
    const again = await createEngine(undefined, { name: first.name });
    await expect(first.as("trainer").gatewaySecret()).rejects.toMatchObject({ status: 401 });
    // What the old trainer token fetched signs nothing the new engine's gateway takes (docs/relay.md, "Trust").
    const newSecret = (await again.as("trainer").gatewaySecret()).secret;
    expect(newSecret).toMatch(/^[0-9a-f]{64}$/);
    expect(newSecret).not.toBe(oldSecret);
  });

  it("lets no token issued while the engine was being deleted fit the engine made again under its name", async () => {
    const first = await createEngine("again");
    await admin.deleteEngine(first.name, { force: true });
    // A token issue that raced the delete got past its liveness check and provisioned the
    // object after the delete had reset it, as the issue route does (the first try may meet the
    // closed instance, which resets; the route tries once more).
    const stray = newTokenSecret("operator");
    const grant = [{ id: newTokenId(), hash: await hashToken(stray), role: "operator" as const }];
    const provision = () => placedEngineStub(env, { name: first.name, jurisdiction: null, locationHint: null }).provision(first.name, grant);
    await provision().catch(provision);
    const again = await createEngine(undefined, { name: first.name });
    expect((await raw(`/e/${again.name}/get_engine_status`, { token: stray })).status).toBe(401);
    expect((await raw(`/e/${again.name}/get_engine_status`, { token: again.tokens.operator })).status).toBe(200);
  });

  it("keeps its alarm when a keep_history delete fails while the alarm fires: results and leases still move on", async () => {
    const e = await createEngine("rv2");
    await rollingWith(e, 2);
    const client = e.as("client");
    const c1 = await client.claimEpisode({ client_uuid: "c1", episode_type: "train", discard_episode_timeout: 60 });
    expect(c1.success).toBe(true);
    await client.endEpisode(endBody("c1", c1.episode_uuid, 1));
    expect((await engineStats(e)).outbox).toBe(1);
    expect((await engineStats(e)).alarm_at).not.toBeNull();

    // D1 is slow, then unreachable, for the delete's drain (locally D1 does not fail: the drain stands in).
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    await runInDurableObject(e.stub, (instance: EngineObject) => {
      const outbox = (instance as unknown as { outbox: { drain: unknown } }).outbox;
      outbox.drain = async () => {
        await gate;
        return { written: 0, error: "D1 is unreachable" };
      };
    });
    const deleting = e.stub.destroy({ force: true, keepHistory: true });
    // The alarm is due while the drain waits on D1.
    e.clock.t += 5_000;
    await new Promise((r) => setTimeout(r, 10));
    expect(await runDurableObjectAlarm(e.stub)).toBe(true);
    release();
    const r = await deleting;
    expect(r).toMatchObject({ ok: false, status: 503 });

    // The engine is back, with a result still in its outbox and a live claim: something must wake it.
    await client.claimEpisode({ client_uuid: "c2", episode_type: "train", discard_episode_timeout: 60 });
    const stats = await engineStats(e);
    expect(stats.outbox).toBe(1);
    expect(stats.claimed).toBe(1);
    expect(stats.alarm_at).not.toBeNull();
  });

  it("refuses a keep_history delete 503 history_not_written when D1 cannot take the last results: an error id, not D1's text, and nothing deleted", async () => {
    const e = await createEngine("rv3");
    await rollingWith(e, 1);
    const c = await e.as("client").claimEpisode({ client_uuid: "c1", episode_type: "train", discard_episode_timeout: 60 });
    await e.as("client").endEpisode(endBody("c1", c.episode_uuid, 1));
    expect((await engineStats(e)).outbox).toBe(1);
    // A real D1 failure: the trajectories' table is gone while the delete writes the last results.
    await env.DB.exec("ALTER TABLE trajectories RENAME TO trajectories_away");
    let refused: Awaited<ReturnType<typeof raw>>;
    try {
      refused = await raw(`/admin/engines/${e.name}?keep_history=true&force=true`, { method: "DELETE", token: ADMIN_TOKEN });
    } finally {
      await env.DB.exec("ALTER TABLE trajectories_away RENAME TO trajectories");
    }
    expect(refused).toMatchObject({ status: 503, json: { error: "history_not_written", detail: expect.stringMatching(/error id [0-9a-f-]{36}.*nothing was deleted/) } });
    expect(refused.text).not.toMatch(/trajectories|SQL|D1_ERROR|no such table/i);
    expect((await engineStats(e)).outbox).toBe(1);
    expect((await e.as("viewer").getEngineStatus()).engine_status).toBe("ENGINE.ROLLING");
    // With D1 back, the same delete keeps the history.
    expect((await raw(`/admin/engines/${e.name}?keep_history=true&force=true`, { method: "DELETE", token: ADMIN_TOKEN })).status).toBe(200);
    expect(await count("SELECT COUNT(*) AS n FROM trajectories WHERE engine LIKE ?", `${e.name}@%`)).toBe(1);
  });

  it("keeps the rest of the history with keep_history when D1 refuses one record for its data, before the delete or during it", async () => {
    // No retry changes such an answer: the one record made every keep_history DELETE a 503, for
    // ever, and the operator's only way out was a delete that kept nothing.
    for (const triedBefore of [true, false]) {
      const e = await createEngine(triedBefore ? "refused-before" : "refused-during");
      await rollingWith(e, 3);
      const trigger = `refuse_${e.name.replace(/\W/g, "_")}`;
      await env.DB.exec(
        `CREATE TRIGGER ${trigger} BEFORE INSERT ON trajectories WHEN NEW.engine = '${e.name}' AND NEW.client_uuid = 'refused' BEGIN SELECT RAISE(ABORT, 'string or blob too big'); END`,
      );
      const logged = vi.spyOn(console, "error").mockImplementation(() => {});
      try {
        for (const client of ["a", "refused", "b"]) {
          const c = await e.as("client").claimEpisode({ client_uuid: client, discard_episode_timeout: 600 });
          expect(await e.as("client").endEpisode(endBody(client, c.episode_uuid, 1))).toEqual({ success: true });
        }
        if (triedBefore) {
          await advance(e, 5_000);
          expect((await engineStats(e)).outbox, "the refused record waits alone").toBe(1);
        }
        const deleted = await raw(`/admin/engines/${e.name}?keep_history=true&force=true`, { method: "DELETE", token: ADMIN_TOKEN });
        expect(deleted.status, deleted.text).toBe(200);
        expect(logged.mock.calls.some((c) => String(c[0]).includes("1 records D1 refused for their data"))).toBe(true);
      } finally {
        logged.mockRestore();
        await env.DB.exec(`DROP TRIGGER ${trigger}`);
      }
      const kept = await env.DB.prepare("SELECT client_uuid FROM trajectories WHERE engine LIKE ? ORDER BY client_uuid").bind(`${e.name}@%`).all<{ client_uuid: string }>();
      expect(kept.results.map((r) => r.client_uuid)).toEqual(["a", "b"]);
    }
  });

  it("deletes every call body of its incarnation, those whose rows retention removed first included", async () => {
    const { e } = await engineWithRowRetainedObject("bodies");
    // No sweep will come for the object once the engine is gone: the delete takes it.
    expect((await admin.deleteEngine(e.name)).done).toBe(true);
    expect(await ledgerKeys(e.name)).toEqual([]);
  });

  it("leaves the call bodies of a history kept under an archive name where its rows point, deleting an engine made again under the name", async () => {
    const first = await createEngine("bodies");
    await rollingWith(first, 1);
    await withGateway(first);
    await recordOne(first, "c1");
    const archive = (await admin.deleteEngine(first.name, { keep_history: true, force: true })).history_kept_as;
    const kept = await ledgerKeys(first.name);
    expect(kept).toHaveLength(1);

    const again = await createEngine(undefined, { name: first.name });
    await rollingWith(again, 1);
    await withGateway(again);
    await recordOne(again, "c1");
    expect(await ledgerObjects(again.name)).toBe(2);
    expect((await admin.deleteEngine(again.name, { force: true })).done).toBe(true);
    expect(await ledgerKeys(again.name)).toEqual(kept);
    expect(await count("SELECT COUNT(*) AS n FROM llm_calls WHERE engine = ? AND body_key = ?", archive, kept[0])).toBe(1);
  });

  it("deletes a big engine in bounded requests; one cut short is finished by repeating it", async () => {
    const e = await createEngine("big");
    const N = 45_000;
    await insertTrajectories(e.name, N);

    const partial = await admin.deleteEngineOnce(e.name);
    expect(partial.done).toBe(false);
    expect(partial.rows["trajectories"]).toBeGreaterThan(0);
    expect(partial.rows["trajectories"]).toBeLessThan(N);
    // Meanwhile: the engine answers 404, its name stays taken, and the list says a delete is under way.
    expect((await raw(`/e/${e.name}/get_engine_status`, { token: e.tokens.viewer })).status).toBe(404);
    await expect(admin.createEngine(e.name)).rejects.toMatchObject({ status: 409, detail: expect.stringContaining("being deleted") });
    await expect(admin.issueToken(e.name, "client")).rejects.toMatchObject({ status: 404 });
    expect((await admin.listEngines()).engines.find((x) => x.name === e.name)?.deleting_since).toEqual(expect.any(Number));

    const rest = await admin.deleteEngine(e.name);
    expect(rest.done).toBe(true);
    expect((partial.rows["trajectories"] ?? 0) + (rest.rows["trajectories"] ?? 0)).toBe(N);
    expect(await count("SELECT COUNT(*) AS n FROM trajectories WHERE engine = ?", e.name)).toBe(0);
    expect(await count("SELECT COUNT(*) AS n FROM engines WHERE name = ?", e.name)).toBe(0);
  });

  it("finishes a keep_history delete as it began: a repeat without the flag is refused, and keeps nothing from the archive", async () => {
    // The docs say to repeat the request; one repeated without keep_history deleted the rows
    // not yet re-filed, leaving a history cut in two: part archived, part gone.
    const e = await createEngine("big-kept");
    const N = 45_000;
    await insertTrajectories(e.name, N);
    const partial = await admin.deleteEngineOnce(e.name, { keep_history: true });
    expect([partial.done, partial.history_kept_as]).toEqual([false, expect.stringMatching(new RegExp(`^${e.name}@\\d+$`))]);

    await expect(admin.deleteEngineOnce(e.name)).rejects.toMatchObject({ status: 409, code: "delete_keeps_history", detail: expect.stringContaining("keep_history=true") });
    expect(await count("SELECT COUNT(*) AS n FROM trajectories WHERE engine IN (?, ?)", e.name, partial.history_kept_as)).toBe(N);

    const rest = await admin.deleteEngine(e.name, { keep_history: true });
    expect([rest.done, rest.history_kept_as]).toEqual([true, partial.history_kept_as]);
    expect(await count("SELECT COUNT(*) AS n FROM trajectories WHERE engine = ?", partial.history_kept_as)).toBe(N);
  });

  it("finishes a delete that keeps nothing as it began: a repeat with keep_history is refused", async () => {
    const e = await createEngine("big-gone");
    await insertTrajectories(e.name, 45_000);
    expect((await admin.deleteEngineOnce(e.name)).done).toBe(false);
    // An archive of what is left would be a history missing what the first request deleted.
    await expect(admin.deleteEngineOnce(e.name, { keep_history: true })).rejects.toMatchObject({ status: 409, code: "delete_keeps_nothing" });
    expect((await admin.deleteEngine(e.name)).done).toBe(true);
  });

  it("answers every request in flight during a delete with 2xx or a clean 404, and leaves nothing behind", async () => {
    const e = await createEngine("load");
    await rollingWith(e, 24);
    const answers: { status: number; error: unknown; path: string }[] = [];
    const call = async (path: string, token: string, body?: unknown) => {
      const r = await raw(`/e/${e.name}${path}`, { token, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
      answers.push({ status: r.status, error: r.json?.["error"], path });
      return r;
    };
    let requests = 0;
    // Evaluation episodes go back to the queue when ended, so the clients never run dry; their results go to D1.
    const client = async (i: number) => {
      for (;;) {
        const c = await call("/claim_episode", e.tokens.client, { client_uuid: `c${i}`, episode_type: "eval", discard_episode_timeout: 600 });
        requests++;
        if (c.status !== 200) return;
        if (c.json?.["success"] !== true) continue;
        const end = await call("/end_episode", e.tokens.client, endBody(`c${i}`, String(c.json["episode_uuid"]), i));
        if (end.status !== 200) return;
      }
    };
    const trainer = async () => {
      for (let i = 0; ; i++) {
        const r = await call("/register_episode", e.tokens.trainer, { episode_uuid: `more-${i}` });
        if (r.status !== 200) return;
      }
    };
    // The outbox flushes to D1 on the engine's alarm: run it over and over, as time passes.
    const alarms = async () => {
      for (;;) {
        try {
          if (!(await advance(e, 1_100))) return;
        } catch {
          return;
        }
      }
    };
    const poll = call("/agent/commands?wait=25", e.tokens.trainer);
    const load = [...Array.from({ length: 6 }, (_, i) => client(i)), trainer(), alarms()];
    await vi.waitFor(() => expect(requests).toBeGreaterThan(80), { timeout: 20_000 });
    const deleted = await admin.deleteEngine(e.name);
    await Promise.all([...load, poll]);

    expect(deleted.done).toBe(true);
    expect(answers.filter((a) => a.status === 404).length).toBeGreaterThan(0);
    expect(answers.filter((a) => !(a.status === 200 || (a.status === 404 && a.error === "unknown_engine")))).toEqual([]);
    const left = await d1Rows(e.name, []);
    expect(left).toEqual(nothing(left));
    expect(await objectState(e.stub)).toEqual({ rows: {}, alarm: null });
  }, 30_000);

  it("keeps no call of a batch recorded across a forced delete: not in D1, nor R2, nor in the ledger of the engine made again under its name", async () => {
    const e = await createEngine("race");
    await rollingWith(e, 1);
    await withGateway(e);
    const claimed = await e.as("client").claimEpisode({ client_uuid: "c-old", discard_episode_timeout: 600 });
    const key = await claimKeyFields(claimed.openai_api_key);

    // R2 is slow to take the batch's bodies (a 1.5 MB object), as it can be: the Worker has already
    // checked the trainer's token with the engine, and writes the batch's D1 rows once R2 answers.
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let putting = 0;
    const bucket = env.LEDGER as unknown as { put: (...a: unknown[]) => Promise<unknown> };
    const put = bucket.put.bind(env.LEDGER);
    bucket.put = async (...a: unknown[]) => {
      putting++;
      await gate;
      return put(...a);
    };
    try {
      const upload = postCalls(e, batchOf([callRecord({ episode: key.episode_uuid, fence: key.fence, client: "c-old" }, { body: { messages: [{ role: "user", content: "old engine's prompt" }] } })]));
      await vi.waitFor(() => expect(putting).toBe(1));
      // Meanwhile the operator deletes the engine (forced: its agent is running) and makes it again.
      expect((await admin.deleteEngine(e.name, { force: true })).done).toBe(true);
      const again = await createEngine(undefined, { name: e.name });
      release();
      expect(await upload).toMatchObject({ status: 404, json: { error: "unknown_engine" } });
      expect((await env.LEDGER.list({ prefix: namePrefix(e.name) })).objects).toEqual([]);

      // Its rows would have landed after the delete looked for them, and read as the new engine's
      // trajectory: it runs the same task set, ep-0 claimed (fence 1 again) and ended, with no LLM call.
      await rollingWith(again, 1);
      const fresh = await again.as("client").claimEpisode({ client_uuid: "c-new", discard_episode_timeout: 600 });
      expect([fresh.episode_uuid, fresh.fence]).toEqual([key.episode_uuid, key.fence]);
      await again.as("client").endEpisode(endBody("c-new", fresh.episode_uuid, 1));
      await advance(again, 2_000);
      const ledger = new LedgerClient({ baseUrl: `${ORIGIN}/e/${again.name}`, token: again.tokens.operator, fetch: workerFetch });
      const traj = await ledger.trajectory(fresh.episode_uuid);
      expect(JSON.stringify(traj)).not.toContain("old engine's prompt");
      expect(await env.DB.prepare("SELECT COUNT(*) AS n FROM llm_calls WHERE engine = ?").bind(e.name).first("n")).toBe(0);
    } finally {
      bucket.put = put;
      release();
    }
  });

  /** Holds the Worker's next `n` D1 batches until `release` (D1 slow to take them); later batches pass. */
  function holdBatches(n: number): { held: () => number; release: () => void; restore: () => void } {
    const db = env.DB as unknown as { batch: (...a: unknown[]) => Promise<unknown> };
    const batch = db.batch.bind(env.DB);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let held = 0;
    db.batch = async (...a: unknown[]) => {
      if (held++ < n) await gate;
      return batch(...a);
    };
    return { held: () => held, release: () => release(), restore: () => ((db.batch = batch), release()) };
  }

  it("writes no training-runs row checked with an engine deleted before it lands: the engine made again under the name starts empty", async () => {
    const e = await createEngine("runs-race");
    await runsAs(e, "trainer").reportCatalog(sampleCatalog());
    await runsAs(e, "operator").selectEnvironment({ name: "gsm8k" });
    const hold = holdBatches(2);
    try {
      // Checked with the engine, then slow to reach D1: the agent's catalog report, and an operator's start.
      const report = refusal(() => runsAs(e, "trainer").reportCatalog({ ...sampleCatalog(), directories: ["/old-agent/envs"] }));
      await vi.waitFor(() => expect(hold.held()).toBe(1));
      const start = refusal(() => runsAs(e, "operator").startRun());
      await vi.waitFor(() => expect(hold.held()).toBe(2));
      // Meanwhile the operator deletes the engine (forced: its agent runs) and makes it again.
      expect((await admin.deleteEngine(e.name, { force: true })).done).toBe(true);
      const again = await createEngine(undefined, { name: e.name });
      hold.release();
      for (const refused of [await report, await start]) expect([refused.status, refused.code]).toEqual([404, "not_found"]);

      // A new, empty engine: no catalog until its own agent reports one, no run, and its first start is its own.
      const catalog = await runsAs(again, "viewer").listEnvironments();
      expect({ count: catalog.count, directories: catalog.directories, scanned_at: catalog.scanned_at }).toEqual({ count: 0, directories: [], scanned_at: null });
      expect((await runsAs(again, "viewer").listRuns()).runs).toEqual([]);
      await runsAs(again, "trainer").reportCatalog(sampleCatalog());
      await runsAs(again, "operator").selectEnvironment({ name: "gsm8k" });
      expect((await runsAs(again, "operator").startRun()).status).toBe("pending");
    } finally {
      hold.restore();
    }
  });

  // The gateway resends a batch whose answer it lost; a resend on the same day writes the object
  // its first store wrote. One refused because a keep_history delete began meanwhile must not
  // delete that object: the kept rows point into it.
  it("keeps the body object of a kept history when a resend of its batch is refused across the delete", async () => {
    const e = await createEngine("resend-kept");
    const claim = { episode: "ep-kept", fence: 1, client: "c1" };
    const batch = batchOf([callRecord(claim, { capture: "messages", body: { messages: [{ role: "user", content: "hello" }], answer: { role: "assistant", content: "hi" } } })], "batch-resend-0001");
    expect((await postCalls(e, batch)).status).toBe(200);
    const key = (await env.DB.prepare("SELECT body_key FROM llm_calls WHERE engine = ?").bind(e.name).first<{ body_key: string }>())!.body_key;
    const incarnation = decodeURIComponent(key.split("/")[2]!);

    // The resend's caller was checked before the delete, which keeps the history.
    const checkedAt = Date.now();
    expect((await admin.deleteEngine(e.name, { force: true, keep_history: true })).done).toBe(true);
    const kept = await env.DB.prepare("SELECT body_key FROM llm_calls WHERE engine LIKE ?").bind(`${e.name}@%`).all<{ body_key: string }>();
    expect(kept.results.map((r) => r.body_key)).toEqual([key]);

    // Refused, nothing of it recorded; the kept history's body is where its row points.
    expect(await recordCalls(env.DB, env.LEDGER, { name: e.name, incarnation, checkedAt }, batch, Date.now())).toBeNull();
    expect(await env.LEDGER.head(key)).not.toBeNull();
  });

  // What a user saw: an operator deletes an engine (DELETE /admin/engines/<name>?force=true)
  // while its hourly retention sweep is waiting on D1. The delete answers 200, yet the deleted
  // engine's Durable Object keeps a stored row (kv ledger_sweep_at) and an alarm an hour out.
  // When that alarm fires on a fresh instance (name null), sweepIfDue returns at once without
  // moving its time, and rearm() sets the alarm to that past time again: the deleted engine's
  // object wakes itself in a tight loop for ever (billed alarms, log noise), and an engine made
  // again under the name inherits the stale sweep schedule.
  it("leaves nothing in the object, and no alarm, when the engine is deleted during the alarm's retention sweep", async () => {
    const e = await createEngine("rr-ret");
    await e.as("trainer").startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
    // A stored step: from now on the buffer's D1 rows are swept hourly.
    await e.as("client").postSteps({ steps: [{ session_id: "s1", group_id: "g1", step_index: 0, messages: [], response: "r", reward: 1, is_session_completed: false }] });
    // The outbox's copy goes to D1 first, so that the next alarm only sweeps.
    e.clock.t += 5_000;
    expect(await runDurableObjectAlarm(e.stub)).toBe(true);

    const { reached, release } = await slowSweeps(e);
    e.clock.t += SWEEP_EVERY_MS;
    const alarm = runDurableObjectAlarm(e.stub);
    await vi.waitFor(() => expect(reached()).toBe(true)); // the alarm is inside sweepIfDue, waiting on D1
    const deleted = await env.ENGINE.get(env.ENGINE.idFromName(e.name)).destroy({ force: true, keepHistory: false });
    expect(deleted.ok).toBe(true);
    release();
    await alarm;

    expect(await objectState(env.ENGINE.get(env.ENGINE.idFromName(e.name)))).toEqual({ rows: {}, alarm: null });
  });

  // What a user saw (the loop above, from the other end): an object holding a sweep time but no
  // engine, as a delete raced by a sweep left it, set its alarm to that past time after every
  // run of it, and so fired for ever.
  it("sets no alarm for a sweep time left in an object that holds no engine", async () => {
    const stub = env.ENGINE.get(env.ENGINE.idFromName("rr-ret-orphan"));
    await runInDurableObject(stub, async (instance: EngineObject, state) => {
      state.storage.sql.exec("INSERT INTO kv (k, v) VALUES ('ledger_sweep_at', ?), ('retention_uses', ?)", JSON.stringify(1_000), JSON.stringify(["buffer"]));
      // As the instance that starts over this storage reads it.
      (instance as unknown as { retention: { reload(): void } }).retention.reload();
      // Far out, so that only the run below fires it.
      await state.storage.setAlarm(Date.now() + HOUR);
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await runInDurableObject(stub, (_i, state) => state.storage.getAlarm())).toBeNull();
  });

  // What a user saw: an operator's DELETE ...?keep_history=true is slow (D1 is slow), so they
  // send DELETE ...?force=true; it answered 200 and the engine was gone. The first one then failed
  // (D1 unreachable) with 503 "nothing was deleted", which was false, and its failure path
  // reopened the deleted instance. The operator made the engine again under the same name: it
  // kept the deleted engine's incarnation (provision() renews it only for a null name, and the
  // name was still in memory), so its gateway secret was the deleted engine's: the old engine's
  // agent, still running on its GPU host, accepted the new engine's relayed calls and its acks
  // carried an incarnation the new engine took as its own. Fences also carried on from the old
  // engine's (fenceHigh in memory), and the old agent's heartbeat record stayed in memory.
  it("makes the engine again with a new incarnation after a keep_history delete failed under a forced one", async () => {
    const e = await createEngine("rr-2del");
    await rollingWith(e, 2);
    const client = e.as("client");
    const old = await client.claimEpisode({ client_uuid: "c", discard_episode_timeout: 600 });
    await client.endEpisode(endBody("c", old.episode_uuid, 1));
    const oldSecret = (await e.as("trainer").gatewaySecret()).secret;

    // D1 is slow for the keep_history drain, then unreachable.
    const { reached, release } = await gatedDrain(e, "fail");
    const first = env.ENGINE.get(env.ENGINE.idFromName(e.name)).destroy({ force: true, keepHistory: true });
    await vi.waitFor(() => expect(reached()).toBe(true));
    // The second delete, through the admin route, while the first waits on D1. Given time to
    // run: side by side with the first it would wipe the object now; it waits for the first instead.
    const second = admin.deleteEngine(e.name, { force: true });
    await Promise.race([second, new Promise((r) => setTimeout(r, 200))]);
    release();
    // Both answers are true when given: the first's 503 "nothing was deleted" comes before the
    // second deletes anything (deletes run one at a time), and the second, now alone, deletes it all.
    expect(await first).toMatchObject({ ok: false, status: 503, error: "history_not_written", detail: expect.stringContaining("nothing was deleted") });
    expect((await second).done).toBe(true);
    expect(await objectState(env.ENGINE.get(env.ENGINE.idFromName(e.name)))).toEqual({ rows: {}, alarm: null });

    // The name made again; a client claims one of its episodes.
    const again = await createEngine(undefined, { name: e.name });
    await rollingWith(again, 1);
    const fresh = await again.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 600 });
    // The new engine is a new incarnation: the deleted engine's keys and its agent's gateway secret do not fit it.
    expect((await claimKeyFields(fresh.openai_api_key)).incarnation).not.toBe((await claimKeyFields(old.openai_api_key)).incarnation);
    expect((await again.as("trainer").gatewaySecret()).secret).not.toBe(oldSecret);
  });
});

/** One ledger call of `name` (an engine's or an archive's), as a keep_history delete leaves it in llm_calls, its body at `bodyKey`. */
async function insertCall(name: string, callId: string, at: number, bodyKey: string): Promise<void> {
  await env.DB.prepare(
    `INSERT INTO llm_calls (engine, call_id, episode_uuid, fence, run, client_uuid, task_id, endpoint, model, stream, weight_version,
       admitted_at, started_at, first_byte_at, done_at, status, error, finish_reason, prompt_tokens, completion_tokens, truncated, body_key, body_offset, body_length)
     VALUES (?1, ?4, 'ep-0', 1, 1, 'c1', 't', '/v1/chat/completions', 'm', 0, NULL, ?2, ?2, NULL, ?2, 200, NULL, 'stop', 1, 1, 0, ?3, 0, 10)`,
  )
    .bind(name, at, bodyKey, callId)
    .run();
}

/** `n` trajectories of `name` written straight to D1: an engine or archive too big for one request to delete. */
async function insertTrajectories(name: string, n: number): Promise<void> {
  await env.DB.prepare(
    `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
     INSERT INTO trajectories (engine, episode_uuid, fence, client_uuid, task_id, episode_type, global_step, reward, is_success, workflow_output, ended_at)
     SELECT ?1, 'ep-' || i, 1, 'c', 't', 'train', 0, 0.5, 1, '{}', i FROM n`,
  )
    .bind(name, n)
    .run();
}

/** Rows of `name` in every history table, and of its runs in theirs. */
async function historyRows(name: string): Promise<number> {
  let n = 0;
  for (const t of HISTORY_TABLES) n += await count(`SELECT COUNT(*) AS n FROM ${t} WHERE engine = ?`, name);
  for (const t of RUN_TABLES) n += await count(`SELECT COUNT(*) AS n FROM ${t} WHERE run_id IN (SELECT id FROM runs WHERE engine = ?)`, name);
  return n;
}

describe("histories kept under an archive name", () => {
  // What a user sees: a lab runs its nightly experiment as engine "nightly", deleted each morning
  // with keep_history=true (its ledger kept). After ~40 nights, deleting "nightly" WITHOUT
  // keep_history answers 202 `done: false` for ever: every repeated DELETE spends its whole budget
  // of 40 statements stepping through the archive names (one D1 query per archive) before it
  // deletes anything, so `AdminClient.deleteEngine` loops for ever, the name stays taken (409
  // "being deleted") and the engine can never be created again.
  // The 40 archives are the rows a keep_history delete leaves in llm_calls (one call each),
  // written directly to keep the test fast; the engine and its deletes are real.
  it("finishes deleting an engine whose name has 40 histories kept under archive names", async () => {
    const name = uniqueName("nightly");
    const first = Date.UTC(2025, 0, 1);
    for (let i = 0; i < 40; i++) {
      const at = first + i * DAY;
      await insertCall(`${name}@${at}`, "call-1", at, `ledger/${name}/inc${i}/2025-01-01/batch-0.jsonl`);
    }
    await createEngine(undefined, { name });

    // An engine with nothing in it: one request should do; allow ten.
    let done = false;
    for (let i = 0; i < 10 && !done; i++) done = (await admin.deleteEngineOnce(name, { force: true })).done;
    expect(done).toBe(true);
    expect(await count("SELECT COUNT(*) AS n FROM engines WHERE name = ?", name)).toBe(0);
  });

  it("finds the archives' incarnations with one statement that seeks through llm_calls' engine index, never scanning calls", async () => {
    const name = uniqueName("plan");
    const plan = await env.DB.prepare(`EXPLAIN QUERY PLAN ${INCARNATION_NAMES_SQL}`).bind(name, `${name}@`, `${name}A`).all<{ detail: string }>();
    const details = plan.results.map((r) => r.detail);
    const onCalls = details.filter((d) => /\bllm_calls\b/.test(d));
    // The start of the walk, each step from one archive name to the next, and one call of each name.
    expect(onCalls.length, details.join("\n")).toBeGreaterThanOrEqual(3);
    for (const d of onCalls) expect(d, details.join("\n")).toMatch(/^SEARCH llm_calls USING (COVERING )?INDEX \S+ \(engine[=>]/);
    expect(details.some((d) => /SEARCH archives USING INDEX archives_from_engine_idx/.test(d)), details.join("\n")).toBe(true);
  });

  // What a user sees: the DELETE that kept the history answers `history_kept_as: "<name>@<ms>"`,
  // and from then on that history can never be removed: DELETE /admin/engines/<archive> answers
  // 404 unknown_engine, no other route takes an archive name, GET /admin/engines does not list it,
  // and no engine's alarm sweeps its ledger calls (retention_days no longer applies). A lab that
  // deletes engines daily with keep_history fills the deployment's one 10 GB D1 (and R2) with
  // histories it has no way to delete short of hand-written SQL.
  it("deletes a history kept under an archive name when it is no longer wanted", async () => {
    const e = await createEngine("exp");
    await rollingWith(e, 1);
    await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 600 });
    await e.as("client").endEpisode(endBody("c1", "ep-0", 1));
    const archive = (await admin.deleteEngine(e.name, { keep_history: true, force: true })).history_kept_as!;
    expect(archive).toMatch(/@\d+$/);
    expect(await count("SELECT COUNT(*) AS n FROM trajectories WHERE engine = ?", archive)).toBe(1);
    expect((await admin.archives({ after: `${e.name}@0` })).archives[0]).toMatchObject({ name: archive, engine: e.name });

    // The engine route points to the archive's.
    const wrong = await raw(`/admin/engines/${encodeURIComponent(archive)}?force=true`, { method: "DELETE", token: ADMIN_TOKEN });
    expect(wrong.status).toBe(404);
    expect(wrong.text).toContain(`DELETE /admin/archives/${archive}`);

    const del = await raw(`/admin/archives/${encodeURIComponent(archive)}`, { method: "DELETE", token: ADMIN_TOKEN });
    expect(del.status, del.text).toBe(200);
    expect(await count("SELECT COUNT(*) AS n FROM trajectories WHERE engine = ?", archive)).toBe(0);
    expect(await historyRows(archive)).toBe(0);
    expect((await admin.archives({ after: `${e.name}@0` })).archives.find((a) => a.name === archive)).toBeUndefined();
    // Gone: a second delete finds nothing; a name that is no archive's is refused.
    await expect(admin.deleteArchiveOnce(archive)).rejects.toMatchObject({ status: 404, code: "unknown_archive" });
    await expect(admin.deleteArchiveOnce(e.name)).rejects.toMatchObject({ status: 422 });
    expect((await raw(`/admin/archives/${encodeURIComponent(archive)}`, { method: "DELETE" })).status).toBe(401);
  });

  it("lists each archive once, in pages, however many requests the delete that kept it took", async () => {
    const e = await createEngine("listed");
    const N = 45_000;
    await insertTrajectories(e.name, N);
    const partial = await admin.deleteEngineOnce(e.name, { keep_history: true });
    expect(partial.done).toBe(false);
    const archive = partial.history_kept_as!;
    // Listed from the first request on; not deletable until the delete that keeps it is done.
    expect((await admin.archives({ after: `${e.name}@0`, limit: 1 })).archives).toEqual([{ name: archive, engine: e.name, created_at: Number(archive.split("@")[1]) / 1000 }]);
    await expect(admin.deleteArchiveOnce(archive)).rejects.toMatchObject({ status: 409, code: "archive_incomplete" });
    expect((await admin.deleteEngine(e.name, { keep_history: true })).history_kept_as).toBe(archive);
    expect(await count("SELECT COUNT(*) AS n FROM trajectories WHERE engine = ?", archive)).toBe(N);

    // Two more of the name's, a page of two at a time: in name order, the oldest first.
    const names = [archive];
    for (let i = 0; i < 2; i++) {
      await createEngine(undefined, { name: e.name });
      names.push((await admin.deleteEngine(e.name, { keep_history: true })).history_kept_as!);
    }
    expect(await count("SELECT COUNT(*) AS n FROM archives WHERE from_engine = ?", e.name)).toBe(3);
    const page1 = await admin.archives({ after: `${e.name}@0`, limit: 2 });
    expect(page1.archives.map((a) => a.name)).toEqual(names.slice(0, 2));
    expect(page1.next).toBe(names[1]);
    const page2 = await admin.archives({ after: page1.next!, limit: 2 });
    expect(page2.archives[0]?.name).toBe(names[2]);
    await expect(admin.archives({ limit: 0 })).rejects.toMatchObject({ status: 422 });
  });

  it("deletes a big archive in bounded requests, and its call bodies, but not those of another archive or of the engine made again under the name", async () => {
    const first = await createEngine("archived");
    await rollingWith(first, 1);
    await withGateway(first);
    await recordOne(first, "c1");
    const doomed = (await admin.deleteEngine(first.name, { keep_history: true, force: true })).history_kept_as!;
    const doomedKeys = await ledgerKeys(first.name);
    expect(doomedKeys).toHaveLength(1);
    const second = await createEngine(undefined, { name: first.name });
    await rollingWith(second, 1);
    await withGateway(second);
    await recordOne(second, "c1");
    const kept = (await admin.deleteEngine(second.name, { keep_history: true, force: true })).history_kept_as!;
    const live = await createEngine(undefined, { name: first.name });
    await rollingWith(live, 1);
    await withGateway(live);
    await recordOne(live, "c1");
    const otherKeys = (await ledgerKeys(first.name)).filter((k) => !doomedKeys.includes(k));
    expect(otherKeys).toHaveLength(2);
    const N = 45_000;
    await insertTrajectories(doomed, N);

    const once = await raw(`/admin/archives/${encodeURIComponent(doomed)}`, { method: "DELETE", token: ADMIN_TOKEN });
    expect(once.status, once.text).toBe(202);
    const partial = DeleteArchiveResponse.parse(once.json);
    expect(partial.done).toBe(false);
    expect(partial.rows["trajectories"]).toBeGreaterThan(0);
    expect(partial.rows["trajectories"]).toBeLessThan(N);
    // Its bodies went first; it is still listed until its last row is gone.
    expect(await ledgerKeys(first.name)).toEqual(otherKeys);
    expect((await admin.archives({ after: `${first.name}@0` })).archives.map((a) => a.name)).toContain(doomed);

    const rest = await admin.deleteArchive(doomed);
    expect(rest.done).toBe(true);
    expect((partial.rows["trajectories"] ?? 0) + (rest.rows["trajectories"] ?? 0)).toBe(N);
    expect(await historyRows(doomed)).toBe(0);
    expect(await count("SELECT COUNT(*) AS n FROM archives WHERE name = ?", doomed)).toBe(0);
    expect((await admin.archives({ after: `${first.name}@0` })).archives.filter((a) => a.engine === first.name).map((a) => a.name)).toEqual([kept]);
    // The other archive and the live engine keep their calls and bodies.
    expect(await ledgerKeys(first.name)).toEqual(otherKeys);
    expect(await count("SELECT COUNT(*) AS n FROM llm_calls WHERE engine = ?", kept)).toBe(1);
    expect(await count("SELECT COUNT(*) AS n FROM llm_calls WHERE engine = ?", live.name)).toBe(1);
  });

  it("deletes an archive made before the archives table by its name, and keeps its bodies when the engine of the name is deleted", async () => {
    // What an older Worker's keep_history delete left: rows under the archive name, no record.
    const name = uniqueName("older");
    const archive = `${name}@${Date.UTC(2025, 0, 1)}`;
    const key = `ledger/${name}/old-inc/2025-01-01/batch-0.jsonl`;
    await insertCall(archive, "call-1", Date.UTC(2025, 0, 1), key);
    await env.LEDGER.put(key, "body");
    await createEngine(undefined, { name });
    expect((await admin.deleteEngine(name, { force: true })).done).toBe(true);
    expect(await ledgerKeys(name)).toEqual([key]);

    expect((await admin.deleteArchive(archive)).rows).toEqual({ llm_calls: 1 });
    expect(await ledgerKeys(name)).toEqual([]);
    await expect(admin.deleteArchiveOnce(archive)).rejects.toMatchObject({ status: 404, code: "unknown_archive" });
  });
});

describe("a forced delete behind a keep_history delete whose D1 call never returns", () => {
  // What a user sees: an operator's DELETE /admin/engines/<name>?keep_history=true hangs because
  // D1 never answers its drain (a stuck connection). They send DELETE ...?force=true, the documented
  // way out. Before deae1f1 the forced delete wiped the engine at once; now it waits on the first
  // delete's promise chain, which never settles: the forced request never answers, the engine's
  // row is never marked as being deleted (GET /admin/engines still shows it live), and every
  // later delete of the name queues behind it too, until the object's instance is evicted.
  it("answers the forced delete within seconds instead of queueing it for ever", async () => {
    const e = await createEngine("rr2-hang");
    await rollingWith(e, 2);
    const client = e.as("client");
    const ep = await client.claimEpisode({ client_uuid: "c", discard_episode_timeout: 600 });
    await client.endEpisode(endBody("c", ep.episode_uuid, 1));

    // D1 never answers the drain's batch (until the test ends).
    const { reached, release } = await gatedDrain(e, "answer");
    const first = env.ENGINE.get(env.ENGINE.idFromName(e.name)).destroy({ force: true, keepHistory: true });
    first.catch(() => undefined);
    await vi.waitFor(() => expect(reached()).toBe(true));
    try {
      const forced = admin.deleteEngine(e.name, { force: true }).then(
        (r) => ({ answered: true as const, r }),
        (err: unknown) => ({ answered: true as const, err }),
      );
      const outcome = await Promise.race([forced, new Promise<{ answered: false }>((r) => setTimeout(() => r({ answered: false }), 5_000))]);
      expect(outcome.answered, "the forced delete got no answer within 5 s: it waits behind the stuck delete").toBe(true);
      expect(outcome).toMatchObject({ err: { status: 503, code: "delete_in_progress" } });
    } finally {
      release();
      await first.catch(() => undefined);
    }
    // Once the first has ended, the same forced delete goes through.
    expect((await admin.deleteEngine(e.name, { force: true })).done).toBe(true);
  }, 20_000);
});
