/**
 * The rollout buffer's bound on the bytes of rows it holds (max_stored_bytes): without it, a
 * trainer that stops pulling lets workers fill the engine's store, since ready groups stay until
 * pulled and staleness_policy flag drops none. Bounds here are the smallest the config takes (1 MiB).
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ExchangeError } from "../src/client";
import { ENGINE_MIGRATIONS, migrateEngine } from "../src/engine/schema";
import { rewindSchema } from "./support/schema-rewind";
import { DEFAULT_BUFFER_CONFIG, MAX_BUFFER_STORED_BYTES, MIN_BUFFER_STORED_BYTES } from "../src/protocol/buffer";
import { advance, createEngine, endBody, raw, rollingWith, type TestEngine } from "./support/harness";

const MIB = 1024 * 1024;
/** A row whose messages, response and extra fields are `content` + 32 bytes of UTF-8 (`[{"role":"user","content":"…"}]` and `{}`). */
const row = (session: string, content: number, done = false, group = `g-${session}`) => ({
  session_id: session,
  group_id: group,
  step_index: 0,
  messages: [{ role: "user", content: "x".repeat(content) }],
  response: "",
  reward: 1,
  is_session_completed: done,
});
const ROW_OVERHEAD = 32;
const post = (e: TestEngine, rows: unknown[]) => raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify({ steps: rows }) });
const configure = (e: TestEngine, body: unknown) => raw(`/e/${e.name}/buffer/config`, { token: e.tokens.operator, body: JSON.stringify(body) });
const held = async (e: TestEngine) => (await e.as("viewer").health()).buffer;
/** The bytes of every row of the buffer's table, counted by SQLite: what stored_bytes must equal. */
const tableBytes = (e: TestEngine) =>
  runInDurableObject(e.stub, (_i, state) =>
    state.storage.sql
      .exec<{ b: number; n: number }>("SELECT COALESCE(SUM(octet_length(messages) + octet_length(response) + octet_length(extra)), 0) AS b, COUNT(*) AS n FROM buf_steps")
      .one(),
  );

async function bounded(groupSize: number): Promise<TestEngine> {
  const e = await createEngine("bufb");
  await e.as("trainer").startRollout({ num_repeat_per_sample: groupSize, job_session: "job-1" });
  expect((await configure(e, { max_stored_bytes: MIN_BUFFER_STORED_BYTES })).status).toBe(200);
  return e;
}

describe("the rollout buffer's max_stored_bytes", () => {
  it("refuses a batch that would pass it with a 503 that stores nothing; rows dropped or pulled free their bytes", async () => {
    const e = await bounded(2);
    for (const s of ["a", "b", "c"]) expect((await post(e, [row(s, 300_000)])).status).toBe(200);
    const three = await tableBytes(e);
    expect(three).toEqual({ b: 3 * (300_000 + ROW_OVERHEAD), n: 3 });
    expect(await held(e)).toMatchObject({ stored_bytes: three.b, full_refusals: 0, config: { max_stored_bytes: MIB } });

    const full = await post(e, [row("d", 200_000), row("e", 10)]);
    expect(full.status).toBe(503);
    expect(full.json).toMatchObject({ error: "buffer_full" });
    expect(String(full.json?.["detail"])).toContain("max_stored_bytes");
    expect(String(full.json?.["detail"])).toContain("1,048,576 bytes");
    const viaClient: unknown = await e.as("client").postSteps({ steps: [row("d", 200_000)] }).catch((err: unknown) => err);
    expect(viaClient).toBeInstanceOf(ExchangeError);
    expect((viaClient as ExchangeError).retryAfterSeconds).toBe(5);
    expect(await tableBytes(e)).toEqual(three);
    expect(await held(e)).toMatchObject({ stored_bytes: three.b, full_refusals: 2, pending_groups: 3 });
    // A batch sent again whose rows are stored already adds nothing: still answered, as duplicates.
    expect((await post(e, [row("a", 300_000)])).json).toMatchObject({ accepted: 0, duplicates: 1 });
    // A small row still fits.
    expect((await post(e, [row("e", 10)])).status).toBe(200);

    // The TTL drops the incomplete groups, and their bytes go with their rows.
    await advance(e, DEFAULT_BUFFER_CONFIG.ttl_seconds * 1000 + 1000);
    expect(await tableBytes(e)).toEqual({ b: 0, n: 0 });
    expect((await held(e)).stored_bytes).toBe(0);
    // Two sessions complete a group; pulled, its rows stay with the last pulls, then go.
    expect((await post(e, [row("f", 300_000, true, "G"), row("g", 300_000, true, "G")])).json).toMatchObject({ groups_ready: ["G"] });
    expect((await held(e)).stored_bytes).toBe((await tableBytes(e)).b);
    expect((await e.as("trainer").getRolloutData()).data.meta_info.finished_groups).toEqual(["G"]);
    expect((await held(e)).stored_bytes).toBe(2 * (300_000 + ROW_OVERHEAD));
    for (let i = 0; i < 4; i++) {
      expect((await post(e, [row(`h${i}`, 10, true, `H${i}`), row(`i${i}`, 10, true, `H${i}`)])).status).toBe(200);
      await e.as("trainer").getRolloutData();
    }
    const after = await tableBytes(e);
    expect(after.n).toBe(8);
    expect((await held(e)).stored_bytes).toBe(after.b);
  }, 60_000);

  it("refuses with a 413 rows that alone are more than max_stored_bytes, which no pull would make room for", async () => {
    const e = await bounded(4);
    const r = await post(e, [row("a", 400_000), row("b", 400_000), row("c", 400_000)]);
    expect(r.status).toBe(413);
    expect(r.json).toMatchObject({ error: "payload_too_large" });
    expect(String(r.json?.["detail"])).toContain("max_stored_bytes");
    expect(await tableBytes(e)).toEqual({ b: 0, n: 0 });
  });

  it("takes max_stored_bytes between 1 MiB and 6 GiB, at least max_message_bytes, and refuses anything else with a 4xx that changes nothing", async () => {
    const e = await createEngine("bufb");
    expect(DEFAULT_BUFFER_CONFIG.max_stored_bytes).toBe(2 * 1024 * MIB);
    expect(MAX_BUFFER_STORED_BYTES).toBe(6 * 1024 * MIB);
    const before = (await held(e)).config;
    expect(before.max_stored_bytes).toBe(2 * 1024 * MIB);
    for (const bad of [MIN_BUFFER_STORED_BYTES - 1, MAX_BUFFER_STORED_BYTES + 1, 0, -5, 2 * MIB + 0.5, "2097152", null, true]) {
      expect((await configure(e, { max_stored_bytes: bad })).status, JSON.stringify(bad)).toBe(422);
    }
    // Below the row size limit: a row the buffer takes could never fit in it.
    const below = await configure(e, { max_stored_bytes: MIB, max_message_bytes: MIB + 1 });
    expect(below.status).toBe(422);
    expect(String(below.json?.["detail"])).toContain("max_message_bytes");
    expect((await configure(e, { max_message_bytes: 1_500_000 })).status).toBe(200);
    expect((await configure(e, { max_stored_bytes: MIB })).status).toBe(422);
    expect((await held(e)).config).toEqual({ ...before, max_message_bytes: 1_500_000 });
    expect((await raw(`/e/${e.name}/buffer/config`, { token: e.tokens.client, body: JSON.stringify({ max_stored_bytes: 2 * MIB }) })).status).toBe(403);
    expect((await configure(e, { max_stored_bytes: MAX_BUFFER_STORED_BYTES })).json).toMatchObject({ max_stored_bytes: MAX_BUFFER_STORED_BYTES });
  });

  it("still records an AgentJet end whose row the full buffer refuses: only its place in the group is lost", async () => {
    const e = await bounded(2);
    await rollingWith(e, 1);
    // Rows that leave less room than a claim's row takes.
    for (const s of ["a", "a2"]) expect((await post(e, [row(s, 400_000)])).status).toBe(200);
    const room = MIB - (await held(e)).stored_bytes;
    expect((await post(e, [row("b", room - ROW_OVERHEAD - 10)])).status).toBe(200);
    expect((await held(e)).stored_bytes).toBe(MIB - 10);
    const client = e.as("client");
    const c = await client.claimEpisode({ client_uuid: "c1", discard_episode_timeout: 600 });
    expect((await client.endEpisode(endBody("c1", c.episode_uuid, 1, "task-7"))).success).toBe(true);
    expect(await held(e)).toMatchObject({ stored_bytes: MIB - 10, full_refusals: 1, pending_groups: 3 });
    await advance(e, 1000);
    const recorded = await env.DB.prepare("SELECT episode_uuid, task_id, reward, outcome FROM trajectories WHERE engine = ?").bind(e.name).all();
    expect(recorded.results).toEqual([{ episode_uuid: c.episode_uuid, task_id: "task-7", reward: 1, outcome: "ended" }]);
  });

  it("counts the bytes held and kept from the tables once, by a migration, for an engine made before the counters", async () => {
    const e = await bounded(2);
    // A pulled group, kept for re-reads, and a pending one.
    expect((await post(e, [row("a1", 300_000, true, "A"), row("a2", 300_000, true, "A")])).json).toMatchObject({ groups_ready: ["A"] });
    expect((await e.as("trainer").getRolloutData()).data.meta_info.finished_groups).toEqual(["A"]);
    expect((await post(e, [row("b", 300_000)])).status).toBe(200);
    const expected = (await tableBytes(e)).b;
    const migrated = await runInDurableObject(e.stub, (_i, state) => {
      const sql = state.storage.sql;
      // The counters as such an engine saved them: one never written, the other written null, before migration 16.
      const saved = JSON.parse(sql.exec<{ v: string }>("SELECT v FROM kv WHERE k = 'buffer_counters'").one().v) as Record<string, unknown>;
      delete saved["storedBytes"];
      saved["keptBytes"] = null;
      sql.exec("UPDATE kv SET v = ? WHERE k = 'buffer_counters'", JSON.stringify(saved));
      rewindSchema(sql, 16);
      const version = migrateEngine(sql);
      return { version, counters: JSON.parse(sql.exec<{ v: string }>("SELECT v FROM kv WHERE k = 'buffer_counters'").one().v) as Record<string, unknown> };
    });
    expect(migrated.version).toBe(ENGINE_MIGRATIONS.length);
    expect(migrated.counters).toMatchObject({ storedBytes: expected, keptBytes: 2 * (300_000 + ROW_OVERHEAD), fullRefusals: 0 });
    expect((await held(e)).stored_bytes).toBe(expected);
    // Only B waits: a new group of 500 KB fits beside it; one more of 300 KB does not.
    expect((await post(e, [row("c", 500_000)])).status).toBe(200);
    const full = await post(e, [row("d", 300_000)]);
    expect([full.status, full.json?.["error"]]).toEqual([503, "buffer_full"]);
    expect((await held(e)).stored_bytes).toBe((await tableBytes(e)).b);
  });

  it("keeps the counters an engine had when the migration that counts them runs", async () => {
    const e = await bounded(2);
    expect((await post(e, [row("a", 1000)])).status).toBe(200);
    const counters = await runInDurableObject(e.stub, (_i, state) => {
      const sql = state.storage.sql;
      rewindSchema(sql, 16);
      const before = sql.exec<{ v: string }>("SELECT v FROM kv WHERE k = 'buffer_counters'").one().v;
      migrateEngine(sql);
      return { before: JSON.parse(before) as unknown, after: JSON.parse(sql.exec<{ v: string }>("SELECT v FROM kv WHERE k = 'buffer_counters'").one().v) as unknown };
    });
    expect(counters.after).toEqual(counters.before);
    expect(counters.after).toMatchObject({ storedBytes: 1000 + ROW_OVERHEAD, keptBytes: 0 });
  });

  it("bounds only rows waiting to be pulled: the rows of pulls kept for re-reading never make the refusal last", async () => {
    const e = await bounded(2);
    // One group of 600 KB, pulled: the buffer has nothing left to hand out, and keeps its rows for a re-read.
    expect((await post(e, [row("a1", 300_000, true, "A"), row("a2", 300_000, true, "A")])).json).toMatchObject({ groups_ready: ["A"] });
    expect((await e.as("trainer").getRolloutData()).data.meta_info.finished_groups).toEqual(["A"]);
    // A pull with nothing ready makes no pull, so those rows stay; the next group of 600 KB is taken all the same.
    for (let i = 0; i < 5; i++) {
      await e.as("trainer").getRolloutData();
      await advance(e, 2 * 24 * 3600 * 1000);
    }
    const next = await post(e, [row("b1", 300_000, true, "B"), row("b2", 300_000, true, "B")]);
    expect(next.status, JSON.stringify(next.json)).toBe(200);
    // stored_bytes still counts every row held, the kept pull's included.
    const table = await tableBytes(e);
    expect(table.n).toBe(4);
    expect((await held(e)).stored_bytes).toBe(table.b);
    // Waiting rows still fill the bound: a batch opening another group is refused, saying what frees room.
    const full = await post(e, [row("c1", 300_000, true, "C"), row("c2", 300_000, true, "C")]);
    expect([full.status, full.json?.["error"]]).toEqual([503, "buffer_full"]);
    expect(String(full.json?.["detail"])).toContain("waiting to be pulled");
    // Once pulled, B waits no more: C is taken.
    expect((await e.as("trainer").getRolloutData()).data.meta_info.finished_groups).toEqual(["B"]);
    expect((await post(e, [row("c1", 300_000, true, "C"), row("c2", 300_000, true, "C")])).status).toBe(200);
    expect((await held(e)).stored_bytes).toBe((await tableBytes(e)).b);
  }, 60_000);

  it("answers a late row of a session restart_training discarded while full, instead of refusing it as one that opens a group", async () => {
    const e = await bounded(2);
    expect((await post(e, [row("old", 300_000)])).status).toBe(200);
    await e.as("trainer").startRollout({ num_repeat_per_sample: 2, restart_training: true, job_session: "job-2" });
    expect(await held(e)).toMatchObject({ stored_bytes: 0, dropped_groups: 1 });
    // The new job fills the bound with open groups; a new one is refused.
    expect((await post(e, [row("a1", 400_000, false, "A")])).status).toBe(200);
    expect((await post(e, [row("b1", 400_000, false, "B")])).status).toBe(200);
    expect((await post(e, [row("c1", 300_000, false, "C")])).status).toBe(503);
    // The old job's straggler names its group, now unknown: it is late, and stores nothing.
    const straggler = await post(e, [{ ...row("old", 300_000, true), step_index: 1 }]);
    expect([straggler.status, straggler.json]).toEqual([200, { success: true, accepted: 0, duplicates: 0, late: 1, groups_ready: [] }]);
    expect(await held(e)).toMatchObject({ stored_bytes: (await tableBytes(e)).b, full_refusals: 1, late_rows_ignored: 1 });
  }, 60_000);

  it("takes rows of groups already open past the bound, so pending groups with the TTL off can still complete", async () => {
    const e = await bounded(2);
    expect((await configure(e, { ttl_seconds: 0 })).status).toBe(200);
    expect((await post(e, [row("a1", 400_000, true, "A")])).status).toBe(200);
    expect((await post(e, [row("b1", 400_000, true, "B")])).status).toBe(200);
    // The rows that complete A and B are taken past the bound, and the trainer pulls them.
    expect((await post(e, [row("a2", 400_000, true, "A")])).json).toMatchObject({ groups_ready: ["A"] });
    // A third group would pass the bound: refused, the 503 saying rows of open groups are taken.
    const opening = await post(e, [row("c1", 400_000, true, "C")]);
    expect([opening.status, opening.json?.["error"]]).toEqual([503, "buffer_full"]);
    expect(String(opening.json?.["detail"])).toContain("already open are always taken");
    expect((await post(e, [row("b2", 400_000, true, "B")])).json).toMatchObject({ groups_ready: ["B"] });
    expect((await e.as("trainer").getRolloutData()).data.meta_info.finished_groups).toEqual(["A", "B"]);
    expect((await post(e, [row("c1", 400_000, true, "C")])).status).toBe(200);
    expect((await held(e)).stored_bytes).toBe((await tableBytes(e)).b);
  }, 60_000);

  it("stores the rows of groups already open of a batch it refuses for opening a new one, so a worker that mixes them never stalls those groups", async () => {
    const e = await bounded(2);
    expect((await configure(e, { ttl_seconds: 0 })).status).toBe(200);
    expect((await post(e, [row("a1", 400_000, true, "A")])).status).toBe(200);
    expect((await post(e, [row("b1", 400_000, true, "B")])).status).toBe(200);
    // A's last session and C's first in one batch: C would pass the bound, A's row is taken.
    const mixed = [row("a2", 400_000, true, "A"), row("c1", 400_000, true, "C")];
    const first = await post(e, mixed);
    expect([first.status, first.json?.["error"]]).toEqual([503, "buffer_full"]);
    expect(String(first.json?.["detail"])).toContain("Its 1 row of groups already begun was stored");
    expect(await held(e)).toMatchObject({ ready_groups: 1, pending_groups: 1, full_refusals: 1 });
    expect((await e.as("trainer").getRolloutData()).data.meta_info.finished_groups).toEqual(["A"]);
    // Sent again once the pull made room: whole, A's row a duplicate.
    expect((await post(e, mixed)).json).toMatchObject({ accepted: 1, duplicates: 1 });
    expect((await held(e)).stored_bytes).toBe((await tableBytes(e)).b);
  }, 60_000);
});
