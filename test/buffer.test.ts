import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { z } from "zod";
import type { StepRow } from "../src/protocol/buffer";
import { SESSION_MEMORY_MS } from "../src/engine/buffer-outcomes";
import { KEPT_PULLS } from "../src/engine/buffer-pulls";
import { START_REPEAT_MS } from "../src/engine/rollout-buffer";
import { MAX_STORED_BYTES, utf8Bytes } from "../src/protocol/limits";
import type { EngineObject } from "../src/engine/engine-object";
import { EngineClient, ExchangeError, type FetchLike } from "../src/client";
import { ORIGIN, advance, createEngine, endBody, engineStats, raw, reconnect, rollingWith, workerFetch, type TestEngine } from "./support/harness";

type Row = z.input<typeof StepRow>;
const step = (session: string, group: string, index: number, reward: number, done = false, extra: Partial<Row> = {}): Row => ({
  session_id: session,
  group_id: group,
  step_index: index,
  messages: [{ role: "user", content: `${session} step ${index}` }],
  response: `answer ${session}/${index}`,
  reward,
  is_session_completed: done,
  ...extra,
});

async function buffered(groupSize: number): Promise<TestEngine> {
  const e = await createEngine("buf");
  await e.as("trainer").startRollout({ num_repeat_per_sample: groupSize, job_session: "job-1" });
  return e;
}

describe("group assembly", () => {
  it("holds a group until group_size distinct sessions complete, with sessions interleaved", async () => {
    const e = await buffered(2);
    const w = e.as("client");
    const r1 = await w.postSteps({ steps: [step("s1", "g1", 0, 0.1), step("s2", "g1", 0, 0.2), step("s3", "g2", 0, 0.3), step("s1", "g1", 1, 1, true)] });
    expect(r1).toEqual({ success: true, accepted: 4, duplicates: 0, late: 0, groups_ready: [] });
    // A second completion row for the same session does not count it twice.
    await w.postSteps({ steps: [step("s1", "g1", 2, 1, true)] });
    const nothing = await e.as("trainer").getRolloutData();
    expect(nothing).toEqual({
      success: false,
      message: "No data available to read",
      data: {
        data: [],
        meta_info: { total_samples: 0, avg_reward: 0, finished_groups: [], avg_weight_version: 0, max_weight_version: 0, cursor: null, stale_groups: [], consumer_weight_version: null, groups: [] },
      },
    });
    const r2 = await w.postSteps({ steps: [step("s2", "g1", 1, 0, true)] });
    expect(r2.groups_ready).toEqual(["g1"]);
    const pulled = await e.as("trainer").getRolloutData();
    expect(pulled.success).toBe(true);
    expect(pulled.message).toBe("Successfully read 5 items");
    // Ordered by session, then step; each session's terminal reward propagated, the original kept.
    expect(pulled.data.data.map((i) => [i.extra_info["session_id"], i.extra_info["steps"], i.reward, i.extra_info["step_reward"]])).toEqual([
      ["s1", 0, 1, 0.1],
      ["s1", 1, 1, 1],
      ["s1", 2, 1, 1],
      ["s2", 0, 0, 0.2],
      ["s2", 1, 0, 0],
    ]);
    const first = pulled.data.data[0]!;
    expect(first.instance_id).toBe("g1");
    expect(first.messages).toEqual([
      { role: "user", content: "s1 step 0" },
      { role: "assistant", content: "answer s1/0" },
    ]);
    expect(first.extra_info).toMatchObject({ finish_reason: "stop", truncated: false, group_id: "g1", weight_version: 0, terminal_reward: 1, stale: false });
    expect(pulled.data.meta_info).toMatchObject({ total_samples: 5, avg_reward: 0.6, finished_groups: ["g1"], cursor: 1, stale_groups: [] });
    // Handed out once.
    expect((await e.as("trainer").getRolloutData()).success).toBe(false);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 1, ready_groups: 0, delivered_groups: 1 });
  });

  it("lists a pull's groups in code point order, as the seed's sorted() does, also past U+FFFF", async () => {
    const e = await buffered(1);
    const ids = ["\u{1F600}", "\uFF21", "b", "\uD7FF"];
    await e.as("client").postSteps({ steps: ids.map((g, k) => step(`s${k}`, g, 0, 1, true)) });
    const meta = (await e.as("trainer").getRolloutData()).data.meta_info;
    expect(meta.finished_groups).toEqual(["b", "\uD7FF", "\uFF21", "\u{1F600}"]);
    expect(meta.groups.map((g) => g.group_id)).toEqual(meta.finished_groups);
  });

  it("gives every step of a session the reward of its last completed step by step, as the seed does, in whatever order the rows came", async () => {
    const e = await buffered(2);
    const w = e.as("client");
    await w.postSteps({ steps: [step("s1", "g", 0, 0.1), step("s1", "g", 1, 0.5, true), step("s1", "g", 2, 1, true)] });
    // s2's completed steps arrive last step first: the earlier step's reward does not overwrite the later's.
    await w.postSteps({ steps: [step("s2", "g", 1, 0.75, true)] });
    await w.postSteps({ steps: [step("s2", "g", 0, 0.25, true)] });
    const items = (await e.as("trainer").getRolloutData()).data.data;
    expect(items.map((i) => [i.extra_info["session_id"], i.extra_info["steps"], i.reward])).toEqual([
      ["s1", 0, 1],
      ["s1", 1, 1],
      ["s1", 2, 1],
      ["s2", 0, 0.75],
      ["s2", 1, 0.75],
    ]);
  });

  it("respects max_groups, oldest ready first, and lets a crashed trainer re-read a pull by its cursor", async () => {
    const e = await buffered(1);
    for (const g of ["a", "b", "c"]) await e.as("client").postSteps({ steps: [step(`s-${g}`, g, 0, 1, true)] });
    const p1 = await e.as("trainer").getRolloutData({ max_groups: 2 });
    expect(p1.data.meta_info.finished_groups).toEqual(["a", "b"]);
    const again = await e.as("trainer").getRolloutData({ cursor: p1.data.meta_info.cursor! });
    expect(again).toEqual(p1);
    const p2 = await e.as("trainer").getRolloutData({ max_groups: 0 });
    expect(p2.data.meta_info.finished_groups).toEqual(["c"]);
    await expect(e.as("trainer").getRolloutData({ cursor: 99 })).rejects.toMatchObject({ status: 404, code: "unknown_cursor" });
  });

  it("forgets pulls older than the last four", async () => {
    const e = await buffered(1);
    const cursors: number[] = [];
    for (let i = 0; i < 6; i++) {
      await e.as("client").postSteps({ steps: [step(`s${i}`, `g${i}`, 0, i, true)] });
      cursors.push((await e.as("trainer").getRolloutData()).data.meta_info.cursor!);
    }
    await expect(e.as("trainer").getRolloutData({ cursor: cursors[1]! })).rejects.toMatchObject({ status: 404 });
    expect((await e.as("trainer").getRolloutData({ cursor: cursors[2]! })).data.meta_info.finished_groups).toEqual(["g2"]);
  });

  it("treats a retried batch as duplicates, never storing a row twice", async () => {
    const e = await buffered(1);
    const batch = { steps: [step("s1", "g1", 0, 0.5), step("s1", "g1", 1, 0.5, true)] };
    expect((await e.as("client").postSteps(batch)).accepted).toBe(2);
    expect(await e.as("client").postSteps(batch)).toMatchObject({ accepted: 0, duplicates: 2, groups_ready: [] });
    const pulled = await e.as("trainer").getRolloutData();
    expect(pulled.data.data).toHaveLength(2);
    expect((await e.as("viewer").health()).buffer.duplicate_rows).toBe(2);
  });

  it("stores two identical batches sent at once (a retry racing the first) once, and answers both", async () => {
    const e = await buffered(1);
    const batch = { steps: [step("s1", "g1", 0, 1), step("s1", "g1", 1, 1, true)] };
    const [a, b] = await Promise.all([e.as("client").postSteps(batch), e.as("client").postSteps(batch)]);
    expect({ accepted: a.accepted + b.accepted, duplicates: a.duplicates + b.duplicates }).toEqual({ accepted: 2, duplicates: 2 });
    expect((await e.as("trainer").getRolloutData({ max_groups: 4 })).data.data).toHaveLength(2);
  });

  it("lets a trainer whose pull's answer was lost find its cursor in /health's last_pull and read it again", async () => {
    const e = await buffered(1);
    await e.as("client").postSteps({ steps: [step("s1", "g1", 0, 1, true)] });
    const lost = await e.as("trainer").getRolloutData({ max_groups: 4 });
    const cursor = (await e.as("viewer").health()).buffer.last_pull!.cursor;
    expect(await e.as("trainer").getRolloutData({ cursor })).toEqual(lost);
    // The worker's retried batch for the delivered group is a duplicate, and hands out nothing again.
    expect(await e.as("client").postSteps({ steps: [step("s1", "g1", 0, 1, true)] })).toMatchObject({ accepted: 0, duplicates: 1 });
    expect((await e.as("trainer").getRolloutData({ max_groups: 4 })).data.data).toHaveLength(0);
  });

  it("hands out a response holding a lone surrogate (Python's json.dumps writes \\ud800) exactly, beside messages that hold one", async () => {
    const e = await buffered(1);
    const text = "証明 𝔸😀 e\u0301 lone:\ud800 end";
    const messages = [{ role: "user", content: text }];
    // As Python sends it: ASCII only, each lone surrogate an escape.
    const body = JSON.stringify({ steps: [step("s1", "g1", 0, 1, true, { messages, response: text })] }).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
    expect((await raw(`/e/${e.name}/steps`, { token: e.tokens.client, body })).status).toBe(200);
    // Compared as JSON, which escapes a lone surrogate: the test's channel cannot carry one.
    const item = (await e.as("trainer").getRolloutData()).data.data[0]!;
    expect(JSON.stringify(item.messages)).toBe(JSON.stringify([...messages, { role: "assistant", content: text }]));
    // Kept escaped; a response without a lone surrogate is kept as it is.
    await e.as("client").postSteps({ steps: [step("s2", "g2", 0, 1, true, { response: "plain 😀" })] });
    const escaped = await runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec<{ session_id: string; response_escaped: number }>("SELECT session_id, response_escaped FROM buf_steps ORDER BY session_id").toArray());
    expect(escaped).toEqual([{ session_id: "s1", response_escaped: 1 }, { session_id: "s2", response_escaped: 0 }]);
  });

  it("counts an escaped response's bytes as stored, so the counter is back at 0 once its row is deleted", async () => {
    const e = await createEngine("buf");
    await e.as("trainer").startRollout({ num_repeat_per_sample: 2, job_session: "job-1" });
    await e.as("operator").configureBuffer({ ttl_seconds: 600 });
    // Code with quotes and newlines, and one lone surrogate: kept as its JSON, which is larger.
    const response = `lone:\ud800 ${'print("x")\n'.repeat(2000)}`;
    const body = JSON.stringify({ steps: [step("s1", "g1", 0, 1, true, { response })] }).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
    expect((await raw(`/e/${e.name}/steps`, { token: e.tokens.client, body })).status).toBe(200);
    const held = await runInDurableObject(e.stub, (_i, state) =>
      state.storage.sql.exec<{ b: number }>("SELECT SUM(length(CAST(messages AS BLOB)) + length(CAST(response AS BLOB)) + length(CAST(extra AS BLOB))) AS b FROM buf_steps").one().b,
    );
    expect((await e.as("viewer").health()).buffer.stored_bytes).toBe(held);
    await advance(e, 601_000);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ dropped_groups: 1, stored_bytes: 0 });
  });

  it("delivers only completed sessions and asks the upstream to clear the others", async () => {
    const e = await buffered(2);
    await e.as("client").postSteps({ steps: [step("s1", "g", 0, 1, true), step("s2", "g", 0, 1, true), step("s3", "g", 0, 0.5)] });
    const pulled = await e.as("trainer").getRolloutData();
    expect(pulled.data.data.map((i) => i.extra_info["session_id"])).toEqual(["s1", "s2"]);
    const { commands } = await e.as("trainer").pollCommands();
    expect(commands.map((c) => c.body)).toContainEqual({ kind: "clear_sessions", session_ids: ["s3"], group_ids: ["g"], reason: "incomplete_sessions_of_delivered_group" });
  });
});

describe("TTL, late rows and staleness", () => {
  it("drops incomplete groups after the TTL by the alarm, ignores and counts their late rows, and tells the agent", async () => {
    const e = await buffered(2);
    await e.as("operator").configureBuffer({ ttl_seconds: 600 });
    await e.as("client").postSteps({ steps: [step("s1", "old", 0, 1, true)] });
    await advance(e, 300_000);
    await e.as("client").postSteps({ steps: [step("s2", "young", 0, 1)] });
    await advance(e, 299_000);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 2, dropped_groups: 0 });
    await advance(e, 1_000);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 1, dropped_groups: 1 });
    const late = await e.as("client").postSteps({ steps: [step("s9", "old", 0, 1, true), step("s2", "young", 1, 1, true)] });
    expect(late).toMatchObject({ accepted: 1, late: 1 });
    const { commands } = await e.as("trainer").pollCommands();
    expect(commands.map((c) => c.body)).toEqual([
      { kind: "start_rollout", group_size: 2, job_session: "job-1", restart_training: false },
      { kind: "clear_sessions", session_ids: ["s1"], group_ids: ["old"], reason: "incomplete_group_ttl" },
      { kind: "clear_sessions", session_ids: ["s9"], group_ids: ["old"], reason: "late_rows_from_dropped_groups" },
    ]);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ late_rows_ignored: 1, dropped_groups: 1 });
    // The young group's TTL counts from its last row, and it still completes.
    await e.as("client").postSteps({ steps: [step("s3", "young", 0, 1, true)] });
    expect((await e.as("trainer").getRolloutData()).data.meta_info.finished_groups).toEqual(["young"]);
  });

  it("flags groups that lag the trainer's weights by default, and drops them under the drop policy", async () => {
    const e = await buffered(1);
    const trainer = e.as("trainer");
    await e.as("client").postSteps({ steps: [step("s1", "old", 0, 1, true, { weight_version: 1 }), step("s2", "new", 0, 1, true, { weight_version: 6 })] });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.OFFLINE", weight_version: 6 });
    const flagged = await trainer.getRolloutData();
    expect(flagged.data.meta_info).toMatchObject({ finished_groups: ["new", "old"], stale_groups: ["old"], avg_weight_version: 3.5, max_weight_version: 6 });
    expect(flagged.data.data.find((i) => i.instance_id === "old")?.extra_info["stale"]).toBe(true);
    expect(flagged.data.data.find((i) => i.instance_id === "new")?.extra_info["stale"]).toBe(false);

    await e.as("operator").configureBuffer({ staleness_policy: "drop", max_staleness: 2 });
    await e.as("client").postSteps({ steps: [step("s3", "older", 0, 1, true, { weight_version: 3 }), step("s4", "fresh", 0, 1, true, { weight_version: 5 })] });
    const dropped = await trainer.getRolloutData();
    expect(dropped.data.meta_info.finished_groups).toEqual(["fresh"]);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ stale_groups: 2, dropped_groups: 1, delivered_groups: 3 });
  });

});

describe("group_size changed while groups wait", () => {
  it("makes waiting groups ready when the group size shrinks", async () => {
    const e = await buffered(3);
    await e.as("client").postSteps({ steps: [step("s1", "g", 0, 1, true), step("s2", "g", 0, 1, true)] });
    expect((await e.as("trainer").getRolloutData()).success).toBe(false);
    await e.as("operator").configureBuffer({ group_size: 2 });
    expect((await e.as("trainer").getRolloutData()).data.meta_info.finished_groups).toEqual(["g"]);
  });

  it("sends a ready group back to waiting when group_size rises past its usable sessions, instead of handing it out as complete", async () => {
    // A GRPO trainer moving from 2 to 4 samples per prompt reshapes each group to 4: a group of 2
    // handed out as complete (partial: false) would break it.
    const e = await buffered(2);
    await e.as("client").postSteps({ steps: [step("s1", "g", 0, 1, true), step("s2", "g", 0, 0, true)] });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ ready_groups: 1 });
    await e.as("operator").configureBuffer({ group_size: 4 });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ ready_groups: 0, pending_groups: 1 });
    const pulled = await e.as("trainer").getRolloutData();
    expect(pulled.data.meta_info.groups.filter((r) => r.usable_sessions < 4 && !r.partial)).toEqual([]);
    expect(pulled.data.meta_info.finished_groups).toEqual([]);
    // It is ready again, and complete, with group_size usable sessions.
    expect(await e.as("client").postSteps({ steps: [step("s3", "g", 0, 1, true), step("s4", "g", 0, 0, true)] })).toMatchObject({ groups_ready: ["g"] });
    const complete = await e.as("trainer").getRolloutData();
    expect(complete.data.meta_info.groups).toMatchObject([{ usable_sessions: 4, partial: false }]);
  });

  it("applies a raised group_size to every ready group alike, whether it fell short by the new size or by a failed session", async () => {
    // g (three usable) and h (two) are ready under group_size 2; it is raised to 4, then one of g's
    // sessions fails: both have 2 usable sessions, so both wait.
    const e = await buffered(2);
    const w = e.as("client");
    await w.postSteps({ steps: [step("g1", "g", 0, 1, true), step("g2", "g", 0, 0, true), step("g3", "g", 0, 1, true)] });
    await w.postSteps({ steps: [step("h1", "h", 0, 1, true), step("h2", "h", 0, 0, true)] });
    await e.as("operator").configureBuffer({ group_size: 4 });
    await w.postSteps({ steps: [step("g3", "g", 1, 1, true, { failed_infra: true })] });
    const buf = (await e.as("viewer").health()).buffer;
    expect({ ready: buf.ready_groups, pending: buf.pending_groups }).toEqual({ ready: 0, pending: 2 });
    expect((await e.as("trainer").getRolloutData()).success).toBe(false);
  });

  it("leaves ready a group that still has enough usable sessions, and a partial group with a usable one", async () => {
    const e = await buffered(2);
    await e.as("operator").configureBuffer({ ttl_seconds: 60, partial_groups: "deliver" });
    const w = e.as("client");
    await w.postSteps({ steps: [step("p1", "partial", 0, 1, true), step("p2", "partial", 0, 1)] });
    await advance(e, 60_000);
    await w.postSteps({ steps: [step("b1", "big", 0, 1, true), step("b2", "big", 0, 1, true), step("b3", "big", 0, 1, true)] });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ ready_groups: 2, pending_groups: 0 });
    await e.as("operator").configureBuffer({ group_size: 3 });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ ready_groups: 2, pending_groups: 0 });
    await e.as("operator").configureBuffer({ group_size: 5 });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ ready_groups: 1, pending_groups: 1 });
    const pulled = await e.as("trainer").getRolloutData();
    expect(pulled.data.meta_info.groups).toMatchObject([{ group_id: "partial", usable_sessions: 1, partial: true }]);
  });

  it("decides a group sent back to waiting at its TTL, counted from its last row: handed out partial under partial_groups deliver", async () => {
    const e = await buffered(2);
    await e.as("operator").configureBuffer({ ttl_seconds: 60, partial_groups: "deliver" });
    await e.as("client").postSteps({ steps: [step("s1", "g", 0, 1, true), step("s2", "g", 0, 0, true)] });
    // Ready groups have no TTL: it waits to be pulled past it.
    await advance(e, 120_000);
    await e.as("operator").configureBuffer({ group_size: 4 });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ ready_groups: 0, pending_groups: 1 });
    // Its last row was 120 s ago: the next alarm decides it.
    await advance(e, 0);
    const pulled = await e.as("trainer").getRolloutData();
    expect(pulled.data.meta_info.groups).toMatchObject([{ group_id: "g", usable_sessions: 2, partial: true }]);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ partial_groups_delivered: 1 });
  });

  it("takes start_rollout's group size without restart_training for the engine, and tells the agent, whose running workers keep theirs", async () => {
    const e = await buffered(2);
    await e.as("client").postSteps({ steps: [step("s1", "g", 0, 1, true), step("s2", "g", 0, 0, true)] });
    await e.as("trainer").startRollout({ num_repeat_per_sample: 4, job_session: "job-2" });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ ready_groups: 0, pending_groups: 1, dropped_groups: 0, config: { group_size: 4 } });
    const { commands } = await e.as("trainer").pollCommands();
    // The agent answers a start while its workers run "already running" (local-agent/src/rollout/workers.ts).
    expect(commands.map((c) => c.body).filter((b) => b.kind === "start_rollout")).toEqual([
      { kind: "start_rollout", group_size: 2, job_session: "job-1", restart_training: false },
      { kind: "start_rollout", group_size: 4, job_session: "job-2", restart_training: false },
    ]);
  });
});

describe("start_rollout sent again", () => {
  it("answers a restart_training start repeated soon after (its answer lost) as the first, discarding nothing and queueing no second command", async () => {
    const e = await buffered(2);
    const trainer = e.as("trainer");
    const req = { num_repeat_per_sample: 2, restart_training: true, job_session: "job-2" };
    const first = await trainer.startRollout(req);
    await e.as("client").postSteps({ steps: [step("s1", "g1", 0, 1, true)] });
    await advance(e, START_REPEAT_MS - 1);
    expect(await trainer.startRollout(req)).toEqual(first);
    // Retries of a retry stay repeats: the minute counts from the last time the start came.
    await advance(e, START_REPEAT_MS - 1);
    expect(await trainer.startRollout(req)).toEqual(first);
    await e.as("client").postSteps({ steps: [step("s2", "g1", 0, 0, true)] });
    const pulled = await trainer.getRolloutData({ max_groups: 4 });
    expect(pulled.data.data.map((i) => i.extra_info["session_id"])).toEqual(["s1", "s2"]);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ dropped_groups: 0, late_rows_ignored: 0, delivered_groups: 1 });
    const { commands } = await trainer.pollCommands({ limit: 10 });
    expect(commands.map((c) => c.body).filter((b) => b.kind === "start_rollout")).toEqual([
      { kind: "start_rollout", group_size: 2, job_session: "job-1", restart_training: false },
      { kind: "start_rollout", group_size: 2, job_session: "job-2", restart_training: true },
    ]);
  });

  it("carries out a start that differs from the last one, and the same start a minute later (a trainer restarted under its job_session)", async () => {
    const e = await buffered(2);
    const trainer = e.as("trainer");
    const kinds = async () => (await trainer.pollCommands({ limit: 10 })).commands.filter((c) => c.body.kind === "start_rollout").map((c) => c.body);
    await e.as("client").postSteps({ steps: [step("s1", "g1", 0, 1)] });
    // The same job_session, now with restart_training: not the same start.
    await trainer.startRollout({ num_repeat_per_sample: 2, restart_training: true, job_session: "job-1" });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 0, dropped_groups: 1 });
    await e.as("client").postSteps({ steps: [step("s2", "g2", 0, 1)] });
    // Another group size under it: carried out too, and the engine takes the size.
    await trainer.startRollout({ num_repeat_per_sample: 3, restart_training: true, job_session: "job-1" });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 0, dropped_groups: 2, config: expect.objectContaining({ group_size: 3 }) });
    await e.as("client").postSteps({ steps: [step("s3", "g3", 0, 1)] });
    await advance(e, START_REPEAT_MS);
    await trainer.startRollout({ num_repeat_per_sample: 3, restart_training: true, job_session: "job-1" });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 0, dropped_groups: 3 });
    expect(await kinds()).toEqual([
      { kind: "start_rollout", group_size: 2, job_session: "job-1", restart_training: false },
      { kind: "start_rollout", group_size: 2, job_session: "job-1", restart_training: true },
      { kind: "start_rollout", group_size: 3, job_session: "job-1", restart_training: true },
      { kind: "start_rollout", group_size: 3, job_session: "job-1", restart_training: true },
    ]);
  });

  it("carries out the same restart_training start within the minute when the engine started a new trainer since", async () => {
    const e = await createEngine("buf");
    const op = e.as("operator");
    const trainer = e.as("trainer");
    await op.syncTrainConfig("x: 1\n");
    await op.startEngine();
    const req = { num_repeat_per_sample: 2, restart_training: true, job_session: "job-1" };
    await trainer.startRollout(req);
    await e.as("client").postSteps({ steps: [step("s1", "g1", 0, 1, true)] });
    // The trainer is restarted (stop, start: a new trainer process), which resumes its job dropping what the old one made.
    await op.stopEngine();
    await op.startEngine();
    await trainer.startRollout(req);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 0, dropped_groups: 1 });
    const { commands } = await trainer.pollCommands({ limit: 20 });
    expect(commands.map((c) => c.body).filter((b) => b.kind === "start_rollout")).toHaveLength(2);
  });

  it("asks the agent again, once and without restart_training, for a repeated start whose workers it reported ended on their own", async () => {
    const e = await buffered(2);
    const trainer = e.as("trainer");
    await e.as("client").postSteps({ steps: [step("s1", "g1", 0, 1)] });
    const agent = { agent_id: "agent-1", host: "gpu-node-1", pid: 1, version: "0.1.0", trainer: { state: "running", pid: 2, started_at: null } } as const;
    const req = { num_repeat_per_sample: 2, restart_training: true, job_session: "job-2" };
    await trainer.startRollout(req);
    const starts = async () => (await trainer.pollCommands({ limit: 10 })).commands.filter((c) => c.body.kind === "start_rollout");
    // The agent carries out job-1's start and job-2's, whose workers then end on their own.
    for (const c of await starts()) await trainer.ackCommand({ seq: c.seq, ok: true });
    await e.as("client").postSteps({ steps: [step("s2", "g2", 0, 1)] });
    await trainer.heartbeat({ ...agent, rollout_workers: { state: "exited", pid: 77, job_session: "job-2", detail: "rollout workers exited with code 1" } });
    await trainer.startRollout(req);
    // Retried again before the agent took that start: one start brings the workers back.
    await trainer.startRollout(req);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 1, dropped_groups: 1 });
    expect((await starts()).map((c) => c.body)).toEqual([{ kind: "start_rollout", group_size: 2, job_session: "job-2", restart_training: false }]);
  });

  it("answers /health with the seed's own fields, read off what the agent last said", async () => {
    // buffer_server.py.txt:628-636: a caller reading resp.json()["aievobox_running"] got a KeyError.
    const e = await createEngine("buf-health");
    const seedFields = async () => {
      const h = await e.as("viewer").health();
      return { aievobox_running: h.aievobox_running, llm_proxy_running: h.llm_proxy_running, data_manager_initialized: h.data_manager_initialized, status: h.status };
    };
    expect(await seedFields()).toEqual({ aievobox_running: false, llm_proxy_running: false, data_manager_initialized: true, status: "healthy" });
    const agent = { agent_id: "agent-1", host: "gpu-node-1", pid: 1, version: "0.1.0", trainer: { state: "running", pid: 2, started_at: null } } as const;
    await e.as("trainer").heartbeat({ ...agent, gateway_url: "http://gpu-node-1:10087", rollout_workers: { state: "running", pid: 77, job_session: "job-1", detail: "" } });
    expect(await seedFields()).toEqual({ aievobox_running: true, llm_proxy_running: true, data_manager_initialized: true, status: "healthy" });
    await e.as("trainer").heartbeat({ ...agent, gateway_url: null, rollout_workers: { state: "exited", pid: 77, job_session: "job-1", detail: "exited with code 1" } });
    expect(await seedFields()).toMatchObject({ aievobox_running: false, llm_proxy_running: false });
  });

  it("takes every start without a job_session as a new one: the engine cannot tell its repeat from a second start", async () => {
    const e = await createEngine("buf");
    const trainer = e.as("trainer");
    const a = await trainer.startRollout({ num_repeat_per_sample: 2, restart_training: true });
    await e.as("client").postSteps({ steps: [step("s1", "g1", 0, 1)] });
    const b = await trainer.startRollout({ num_repeat_per_sample: 2, restart_training: true });
    expect(b.job_session).not.toBe(a.job_session);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 0, dropped_groups: 1 });
    // The job_session the engine chose makes the start's repeat known as one.
    expect(await trainer.startRollout({ num_repeat_per_sample: 2, restart_training: true, job_session: b.job_session })).toEqual(b);
    expect((await trainer.pollCommands({ limit: 10 })).commands.map((c) => c.body.kind)).toEqual(["start_rollout", "clear_sessions", "start_rollout"]);
  });
});

describe("restart_training with work in flight", () => {
  it("frees the ids of pending and dropped groups for the new job", async () => {
    const e = await buffered(2);
    await e.as("operator").configureBuffer({ ttl_seconds: 10 });
    await e.as("client").postSteps({ steps: [step("s1", "gone", 0, 1, true)] });
    await advance(e, 10_000);
    await e.as("client").postSteps({ steps: [step("s2", "pending", 0, 1, true)] });
    await e.as("trainer").startRollout({ num_repeat_per_sample: 1, restart_training: true, job_session: "job-2" });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 0, ready_groups: 0, pending_steps: 0, config: { group_size: 1 } });
    const fresh = await e.as("client").postSteps({ steps: [step("s3", "gone", 0, 1, true), step("s4", "pending", 0, 1, true)] });
    expect(fresh).toMatchObject({ accepted: 2, late: 0, groups_ready: ["gone", "pending"] });
  });

  it("records the groups it discards as dropped, reason restart_training: their outcome goes to D1 and they are counted", async () => {
    const e = await buffered(2);
    await e.as("client").postSteps({ steps: [step("r1", "ready", 0, 1, true), step("r2", "ready", 0, 0, true), step("p1", "pending", 0, 1)] });
    await e.as("trainer").startRollout({ num_repeat_per_sample: 2, restart_training: true, job_session: "job-2" });
    await advance(e, 5_000);
    const steps = await env.DB.prepare("SELECT DISTINCT group_id FROM buffer_steps WHERE engine = ? ORDER BY group_id").bind(e.name).all();
    expect(steps.results.map((r) => r["group_id"])).toEqual(["pending", "ready"]);
    const groups = await env.DB.prepare("SELECT group_id, outcome, reason, sessions, steps FROM buffer_groups WHERE engine = ? ORDER BY group_id").bind(e.name).all();
    expect(groups.results).toEqual([
      { group_id: "pending", outcome: "dropped", reason: "restart_training", sessions: 1, steps: 1 },
      { group_id: "ready", outcome: "dropped", reason: "restart_training", sessions: 2, steps: 2 },
    ]);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ dropped_groups: 2, stale_groups: 0, pending_groups: 0, ready_groups: 0, stored_bytes: 0 });
  });

  it("asks the agent to clear the sessions of the groups it discards", async () => {
    const e = await buffered(2);
    await e.as("client").postSteps({ steps: [step("r1", "ready", 0, 1, true), step("r2", "ready", 0, 0, true), step("p1", "pending", 0, 1)] });
    await e.as("trainer").startRollout({ num_repeat_per_sample: 2, restart_training: true, job_session: "job-2" });
    const { commands } = await e.as("trainer").pollCommands();
    expect(commands.map((c) => c.body).filter((b) => b.kind === "clear_sessions")).toEqual([
      { kind: "clear_sessions", session_ids: ["p1", "r1", "r2"], group_ids: ["pending", "ready"], reason: "restart_training" },
    ]);
  });

  it("counts a pre-restart session's straggler row as late, not as a new truncated trajectory, while its group id serves the new job", async () => {
    // A worker of the old job posts step 2 of s1 just after the restart (its SIGTERM came after
    // its POST left): s1's steps 0 and 1 are gone, and with group_size 1 the straggler alone
    // would be a ready group, a trajectory missing its first two turns.
    const e = await buffered(1);
    const w = e.as("client");
    await w.postSteps({ steps: [step("s1", "g", 0, 0), step("s1", "g", 1, 0)] });
    await e.as("trainer").startRollout({ num_repeat_per_sample: 1, restart_training: true, job_session: "job-2" });
    expect(await w.postSteps({ steps: [step("s1", "g", 2, 1, true)] })).toMatchObject({ accepted: 0, late: 1, groups_ready: [] });
    // A retried batch of the old job is a duplicate, as for any dropped group.
    expect(await w.postSteps({ steps: [step("s1", "g", 1, 0)] })).toMatchObject({ accepted: 0, duplicates: 1, late: 0 });
    expect((await e.as("trainer").getRolloutData()).data.data).toEqual([]);
    // The new job's session of group g is a group of its own.
    expect(await w.postSteps({ steps: [step("n1", "g", 0, 1, true)] })).toMatchObject({ accepted: 1, groups_ready: ["g"] });
    const pulled = await e.as("trainer").getRolloutData();
    expect(pulled.data.data.map((i) => i.extra_info["session_id"])).toEqual(["n1"]);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ late_rows_ignored: 1, duplicate_rows: 1, delivered_groups: 1, dropped_groups: 1 });
    const { commands } = await e.as("trainer").pollCommands();
    expect(commands.map((c) => c.body).filter((b) => b.kind === "clear_sessions")).toEqual([
      { kind: "clear_sessions", session_ids: ["s1"], group_ids: ["g"], reason: "restart_training" },
      { kind: "clear_sessions", session_ids: ["s1"], group_ids: ["g"], reason: "late_rows_from_dropped_groups" },
    ]);
  });

  it("counts as late a discarded session's row naming another group, and the rows of sessions of groups dropped before the restart", async () => {
    const e = await buffered(2);
    await e.as("operator").configureBuffer({ ttl_seconds: 10 });
    const w = e.as("client");
    await w.postSteps({ steps: [step("d1", "gone", 0, 1)] });
    await advance(e, 10_000);
    await w.postSteps({ steps: [step("s1", "g", 0, 1)] });
    await e.as("trainer").startRollout({ num_repeat_per_sample: 2, restart_training: true, job_session: "job-2" });
    expect(await w.postSteps({ steps: [step("s1", "elsewhere", 1, 1, true), step("d1", "gone", 1, 1, true)] })).toMatchObject({ accepted: 0, late: 2 });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 0, late_rows_ignored: 2 });
  });

  it("still refuses a session moving to another group when its group's name only looks like a discarded one, and frees that name at a restart", async () => {
    const e = await buffered(2);
    await e.as("operator").configureBuffer({ ttl_seconds: 10 });
    const named = "restart_training:not-a-uuid:g";
    await e.as("client").postSteps({ steps: [step("s1", named, 0, 1)] });
    await advance(e, 10_000);
    const moved = await raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify({ steps: [step("s1", "other", 1, 1, true)] }) });
    expect(moved).toMatchObject({ status: 422, json: { error: "invalid_request", detail: `steps.0: session s1 belongs to group ${named}, not other` } });
    await e.as("trainer").startRollout({ num_repeat_per_sample: 1, restart_training: true, job_session: "job-2" });
    expect(await e.as("client").postSteps({ steps: [step("s2", named, 0, 1, true)] })).toMatchObject({ accepted: 1, groups_ready: [named] });
  });

  it("forgets the sessions it discards SESSION_MEMORY_MS after, by the alarm; a later restart leaves that memory as it is", async () => {
    const e = await buffered(2);
    await e.as("operator").configureBuffer({ ttl_seconds: 0 });
    const w = e.as("client");
    const remembered = () =>
      runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM buf_sessions").one().n);
    await w.postSteps({ steps: [step("s1", "g", 0, 1)] });
    await e.as("trainer").startRollout({ num_repeat_per_sample: 2, restart_training: true, job_session: "job-2" });
    await advance(e, 24 * 3600 * 1000);
    await w.postSteps({ steps: [step("s2", "g", 0, 1)] });
    await e.as("trainer").startRollout({ num_repeat_per_sample: 2, restart_training: true, job_session: "job-3" });
    expect(await remembered()).toBe(2);
    await advance(e, SESSION_MEMORY_MS - 24 * 3600 * 1000 - 1);
    expect(await w.postSteps({ steps: [step("s1", "g", 1, 1)] })).toMatchObject({ accepted: 0, late: 1 });
    await advance(e, 1);
    expect(await remembered()).toBe(1);
    // s1 is free again: its row starts a new group; s2, discarded a day later, is still late.
    expect(await w.postSteps({ steps: [step("s1", "g", 1, 1), step("s2", "g", 1, 1)] })).toMatchObject({ accepted: 1, late: 1 });
    // A day later s2's memory ends too: only s1's new session is left.
    await advance(e, 24 * 3600 * 1000);
    expect(await remembered()).toBe(1);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 1, dropped_groups: 2, late_rows_ignored: 2 });
  });

  it("takes a discarded session's late row under pace instead of refusing it 503 as a row that opens a group", async () => {
    const e = await buffered(2);
    const w = e.as("client");
    await w.postSteps({ steps: [step("s1", "g", 0, 1)] });
    await e.as("trainer").startRollout({ num_repeat_per_sample: 2, restart_training: true, job_session: "job-2" });
    await e.as("operator").configureBuffer({ staleness_policy: "pace", max_staleness: 1, rollouts_per_version: 2 });
    const trainer = e.as("trainer");
    await trainer.updateEngineStatus({ engine_status: "ENGINE.OFFLINE", weight_version: 0 });
    await w.postSteps({ steps: [step("n1", "h", 0, 1), step("n2", "h", 0, 1)] });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.OFFLINE", weight_version: 2 });
    await expect(w.postSteps({ steps: [step("n3", "k", 0, 1)] })).rejects.toMatchObject({ status: 503, code: "paced" });
    expect(await w.postSteps({ steps: [step("s1", "g", 1, 1, true)] })).toMatchObject({ accepted: 0, late: 1 });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ paced_refusals: 1, late_rows_ignored: 1 });
  });
});

describe("groups that survive failures that are not the policy's", () => {
  it("keeps a failed_infra session flagged and counted, but completes the group on group_size usable sessions without it", async () => {
    const e = await buffered(2);
    const w = e.as("client");
    await w.postSteps({ steps: [step("s1", "g", 0, 1, true), step("s2", "g", 0, 0), step("s2", "g", 1, 0, true, { failed_infra: true })] });
    expect((await e.as("trainer").getRolloutData()).success).toBe(false);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 1, failed_sessions: 1 });
    const r = await w.postSteps({ steps: [step("s3", "g", 0, 0.5, true)] });
    expect(r.groups_ready).toEqual(["g"]);
    const pulled = await e.as("trainer").getRolloutData();
    // The failed session is excluded from a complete group: exactly the usable ones, each marked usable.
    expect(pulled.data.data.map((i) => [i.extra_info["session_id"], i.extra_info["usable"]])).toEqual([
      ["s1", true],
      ["s3", true],
    ]);
    expect(pulled.data.meta_info.groups).toMatchObject([{ group_id: "g", usable_sessions: 2, failed_sessions: 1, partial: false }]);
    // The failed field is the buffer's own, not a free-form one.
    expect(pulled.data.data[0]!.extra_info["failed_infra"]).toBe(false);
    await advance(e, 5_000);
    const steps = await env.DB.prepare("SELECT session_id FROM buffer_steps WHERE engine = ? ORDER BY session_id, step_index").bind(e.name).all();
    expect(steps.results.map((x) => x["session_id"])).toEqual(["s1", "s2", "s2", "s3"]);
  });

  it("takes a usable session back when a later row marks it failed, and a ready group waits again", async () => {
    const e = await buffered(2);
    const w = e.as("client");
    expect((await w.postSteps({ steps: [step("s1", "g", 0, 1, true), step("s2", "g", 0, 1, true)] })).groups_ready).toEqual(["g"]);
    // A judge that timed out after the fact: the session's retried last step says so.
    await w.postSteps({ steps: [step("s2", "g", 1, 0, false, { failed_infra: true })] });
    expect((await e.as("trainer").getRolloutData()).success).toBe(false);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 1, ready_groups: 0, failed_sessions: 1 });
    await w.postSteps({ steps: [step("s3", "g", 0, 0, true)] });
    expect((await e.as("trainer").getRolloutData()).data.meta_info.groups).toMatchObject([{ group_id: "g", usable_sessions: 2, failed_sessions: 1 }]);
  });

  it("keeps a partial group ready when a later row fails a session it was not counting on, or one of several usable ones", async () => {
    const e = await buffered(4);
    await e.as("operator").configureBuffer({ ttl_seconds: 10, partial_groups: "deliver" });
    const w = e.as("client");
    await w.postSteps({ steps: [step("s1", "g", 0, 1, true), step("s2", "g", 0, 0, true)] });
    await advance(e, 10_000);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ ready_groups: 1, pending_groups: 0 });
    // A straggler whose sandbox died, then a judge's timeout on s2: one usable session is left.
    await w.postSteps({ steps: [step("s3", "g", 0, 0, true, { failed_infra: true })] });
    await w.postSteps({ steps: [step("s2", "g", 1, 0, true, { failed_infra: true })] });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ ready_groups: 1, pending_groups: 0, failed_sessions: 2 });
    const pulled = await e.as("trainer").getRolloutData();
    expect(pulled.data.meta_info.groups).toMatchObject([{ group_id: "g", partial: true, usable_sessions: 1, failed_sessions: 2 }]);
  });

  it("sends a partial group back to waiting when its last usable session fails", async () => {
    const e = await buffered(4);
    await e.as("operator").configureBuffer({ ttl_seconds: 10, partial_groups: "deliver" });
    await e.as("client").postSteps({ steps: [step("s1", "g", 0, 1, true)] });
    await advance(e, 10_000);
    await e.as("client").postSteps({ steps: [step("s1", "g", 1, 0, true, { failed_infra: true })] });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ ready_groups: 0, pending_groups: 1 });
    expect((await e.as("trainer").getRolloutData()).success).toBe(false);
  });

  it("hands out a partial group that filled to group_size before it was pulled as complete, its failed sessions left out", async () => {
    const e = await buffered(3);
    await e.as("operator").configureBuffer({ ttl_seconds: 10, partial_groups: "deliver" });
    const w = e.as("client");
    await w.postSteps({ steps: [step("s1", "g", 0, 1, true), step("f", "g", 0, 0, true, { failed_infra: true })] });
    await advance(e, 10_000);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ ready_groups: 1, pending_groups: 0 });
    // The stragglers finish before the trainer pulls: the group has its group_size usable sessions.
    await w.postSteps({ steps: [step("s2", "g", 0, 0.5, true), step("s3", "g", 0, 0, true)] });
    const pulled = await e.as("trainer").getRolloutData();
    expect(pulled.data.meta_info.groups).toMatchObject([{ group_id: "g", partial: false, usable_sessions: 3 }]);
    expect(pulled.data.data.map((i) => [i.extra_info["session_id"], i.extra_info["usable"]])).toEqual([
      ["s1", true],
      ["s2", true],
      ["s3", true],
    ]);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ partial_groups_delivered: 0, delivered_groups: 1 });
    await advance(e, 5_000);
    const groups = await env.DB.prepare("SELECT group_id, reason, partial FROM buffer_groups WHERE engine = ?").bind(e.name).all();
    expect(groups.results).toEqual([{ group_id: "g", reason: "complete", partial: 0 }]);
  });

  it("hands out a partial group as complete once group_size is lowered to its usable sessions, as one that filled", async () => {
    const e = await buffered(3);
    await e.as("operator").configureBuffer({ ttl_seconds: 10, partial_groups: "deliver" });
    await e.as("client").postSteps({ steps: [step("s1", "g", 0, 1, true), step("s2", "g", 0, 0, true), step("f", "g", 0, 0, true, { failed_infra: true })] });
    await advance(e, 10_000);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ ready_groups: 1, pending_groups: 0 });
    // The trainer moves to 2 samples a prompt: g has 2 usable sessions, a complete group now.
    await e.as("operator").configureBuffer({ group_size: 2 });
    const pulled = await e.as("trainer").getRolloutData();
    expect(pulled.data.meta_info.groups).toMatchObject([{ group_id: "g", usable_sessions: 2, partial: false }]);
    expect(pulled.data.data.map((i) => [i.extra_info["session_id"], i.extra_info["usable"]])).toEqual([
      ["s1", true],
      ["s2", true],
    ]);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ partial_groups_delivered: 0, delivered_groups: 1 });
  });

  it("delivers a group short of group_size at its TTL with a usable mask under partial_groups deliver, and counts it", async () => {
    const e = await buffered(4);
    await e.as("operator").configureBuffer({ ttl_seconds: 60, partial_groups: "deliver" });
    const w = e.as("client");
    await w.postSteps({
      steps: [step("s1", "short", 0, 1, true), step("s2", "short", 0, 0, true, { failed_infra: true }), step("s3", "short", 0, 0), step("f1", "allfailed", 0, 0, true, { failed_infra: true })],
    });
    await advance(e, 60_000);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 0, ready_groups: 1, dropped_groups: 1, partial_groups_dropped: 1 });
    const pulled = await e.as("trainer").getRolloutData();
    // Completed sessions only, the failed one masked; the unfinished s3 is not delivered and is cleared upstream.
    expect(pulled.data.data.map((i) => [i.extra_info["session_id"], i.extra_info["usable"]])).toEqual([
      ["s1", true],
      ["s2", false],
    ]);
    expect(pulled.data.meta_info.groups).toMatchObject([{ group_id: "short", usable_sessions: 1, failed_sessions: 1, partial: true, queued_seconds: 0 }]);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ partial_groups_delivered: 1, delivered_groups: 1, failed_sessions: 2 });
    await advance(e, 5_000);
    const groups = await env.DB.prepare("SELECT group_id, outcome, reason, failed_sessions, partial, lag_versions, queued_seconds FROM buffer_groups WHERE engine = ? ORDER BY seq")
      .bind(e.name)
      .all();
    expect(groups.results).toEqual([
      { group_id: "allfailed", outcome: "dropped", reason: "incomplete_group_ttl", failed_sessions: 1, partial: 0, lag_versions: null, queued_seconds: null },
      { group_id: "short", outcome: "delivered", reason: "partial", failed_sessions: 1, partial: 1, lag_versions: null, queued_seconds: 0 },
    ]);
  });

  it("drops a group short of group_size at its TTL under partial_groups drop (the default), and counts it", async () => {
    const e = await buffered(2);
    expect((await e.as("operator").configureBuffer({ ttl_seconds: 60 })).partial_groups).toBe("drop");
    await e.as("client").postSteps({ steps: [step("s1", "short", 0, 1, true)] });
    await advance(e, 60_000);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ dropped_groups: 1, partial_groups_dropped: 1, partial_groups_delivered: 0 });
    expect((await e.as("trainer").getRolloutData()).success).toBe(false);
  });

  it("refuses a partial_groups it does not know, changing nothing", async () => {
    const e = await buffered(2);
    await expect(e.as("operator").configureBuffer({ partial_groups: "keep" as "drop" })).rejects.toMatchObject({ status: 422 });
    expect((await e.as("viewer").health()).buffer.config.partial_groups).toBe("drop");
  });

  it("refuses a misspelt setting 422, naming it, instead of answering 200 and changing nothing", async () => {
    const e = await buffered(2);
    const before = (await e.as("viewer").health()).buffer.config;
    const res = await raw(`/e/${e.name}/buffer/config`, { token: e.tokens.operator, body: JSON.stringify({ max_staleness: 0, staleness_polcy: "drop" }) });
    expect(res).toMatchObject({ status: 422, json: { error: "invalid_request" } });
    expect(JSON.stringify(res.json)).toContain("staleness_polcy");
    expect((await e.as("viewer").health()).buffer.config).toEqual(before);
  });
});

/** The Worker's answers with `edit` applied to the JSON of those whose path ends with `suffix`: the same exchange, one version newer. */
const newerExchange =
  (suffix: string, edit: (json: Record<string, unknown>) => void): FetchLike =>
  async (input, init) => {
    const res = await workerFetch(input, init);
    if (!new URL(input).pathname.endsWith(suffix) || !res.ok) return res;
    const json = (await res.json()) as Record<string, unknown>;
    edit(json);
    return new Response(JSON.stringify(json), { status: res.status, headers: res.headers });
  };

const configOf = (json: Record<string, unknown>): Record<string, unknown> => {
  const buffer = json["buffer"] as Record<string, unknown> | undefined;
  return (buffer?.["config"] ?? json) as Record<string, unknown>;
};

describe("an SDK older than the exchange", () => {
  it("reads /health and configure_buffer's answer naming policies it does not know (a newer exchange's)", async () => {
    const e = await buffered(2);
    const fetch = newerExchange("/health", (j) => {
      configOf(j)["staleness_policy"] = "adaptive";
      configOf(j)["partial_groups"] = "requeue";
    });
    const sdk = new EngineClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens.operator, fetch });
    const health = await sdk.health();
    const configured = await new EngineClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens.operator, fetch: newerExchange("/buffer/config", (j) => (configOf(j)["staleness_policy"] = "adaptive")) }).configureBuffer({ max_staleness: 2 });
    expect({ status: health.status, policies: [health.buffer.config.staleness_policy, health.buffer.config.partial_groups], configured: [configured.staleness_policy, configured.max_staleness] }).toEqual({
      status: "healthy",
      policies: ["adaptive", "requeue"],
      configured: ["adaptive", 2],
    });
  });

  it("still refuses to set a staleness policy it does not know, changing nothing", async () => {
    const e = await buffered(2);
    const res = await raw(`/e/${e.name}/buffer/config`, { token: e.tokens.operator, body: JSON.stringify({ staleness_policy: "adaptive" }) });
    expect({ status: res.status, policy: (await e.as("viewer").health()).buffer.config.staleness_policy }).toEqual({ status: 422, policy: "flag" });
  });

  it("throws an answer of a shape it cannot read as ExchangeError unreadable_answer naming the fields, not their values, nor a bare ZodError", async () => {
    const e = await buffered(2);
    const sdk = new EngineClient({
      baseUrl: `${ORIGIN}/e/${e.name}`,
      token: e.tokens.viewer,
      fetch: newerExchange("/health", (j) => {
        configOf(j)["group_size"] = "two-secret";
        (j["buffer"] as Record<string, unknown>)["stored_bytes"] = null;
      }),
    });
    const err = await sdk.health().then(
      () => null,
      (x: unknown) => x,
    );
    expect(err).toBeInstanceOf(ExchangeError);
    const { status, code, detail } = err as ExchangeError;
    expect({ status, code, names: ["buffer.config.group_size", "buffer.stored_bytes", "newer client"].map((s) => detail.includes(s)), leaks: detail.includes("two-secret") }).toEqual({
      status: 200,
      code: "unreadable_answer",
      names: [true, true, true],
      leaks: false,
    });
  });
});

describe("staleness as consumption lag, and pacing instead of discarding", () => {
  it("reports an AgentJet rollout's lag from the version it was claimed at, and its time queued", async () => {
    const e = await buffered(1);
    await rollingWith(e, 1);
    const trainer = e.as("trainer");
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 2 });
    const c = await e.as("client").claimEpisode({ client_uuid: "slow", discard_episode_timeout: 600 });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 5 });
    await advance(e, 30_000);
    await e.as("client").endEpisode(endBody("slow", c.episode_uuid, 1, "t"));
    await advance(e, 12_000);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 6 });
    const pulled = await trainer.getRolloutData();
    expect(pulled.data.data[0]!.extra_info).toMatchObject({ weight_version: 2, end_weight_version: 5 });
    expect(pulled.data.meta_info).toMatchObject({
      consumer_weight_version: 6,
      groups: [{ group_id: "t", oldest_weight_version: 2, lag_versions: 4, age_seconds: 12, queued_seconds: 12 }],
    });
    // Read again, the pull reports what it reported.
    expect(await trainer.getRolloutData({ cursor: pulled.data.meta_info.cursor! })).toEqual(pulled);
    await advance(e, 5_000);
    const recorded = await env.DB.prepare("SELECT group_id, consumer_weight_version, lag_versions, queued_seconds FROM buffer_groups WHERE engine = ?").bind(e.name).all();
    expect(recorded.results).toEqual([{ group_id: "t", consumer_weight_version: 6, lag_versions: 4, queued_seconds: 12 }]);
  });

  it("stamps a claim made before any weight version was reported with version 0, not the version reported by its end", async () => {
    const e = await buffered(1);
    const trainer = e.as("trainer");
    const client = e.as("client");
    await e.as("operator").configureSync({ keep_claims_across_sync: true });
    await e.as("operator").configureBuffer({ max_staleness: 2 });
    // AgentJet's trainer reports no weight_version while it rolls the first batch.
    await rollingWith(e, 1);
    const c = await client.claimEpisode({ client_uuid: "slow", discard_episode_timeout: 600 });
    for (let v = 1; v <= 5; v++) {
      await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
      await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: v });
    }
    await client.endEpisode(endBody("slow", c.episode_uuid, 1, "t"));
    const pulled = await trainer.getRolloutData();
    expect(pulled.data.data[0]!.extra_info).toMatchObject({ weight_version: 0, end_weight_version: 5 });
    expect(pulled.data.meta_info).toMatchObject({ stale_groups: ["t"], groups: [{ oldest_weight_version: 0, lag_versions: 5 }] });
  });

  it("stamps a posted row that names no weight_version with the engine's version, so it is neither dropped as stale nor paced", async () => {
    // A worker that does not track versions (the field is optional) posts whole groups at version 10's time.
    const dropping = await buffered(1);
    await dropping.as("operator").configureBuffer({ staleness_policy: "drop", max_staleness: 2 });
    await dropping.as("trainer").updateEngineStatus({ engine_status: "ENGINE.OFFLINE", weight_version: 10 });
    await dropping.as("client").postSteps({ steps: [step("s1", "g1", 0, 1, true)] });
    // Not taken as version 0, 10 behind, which dropped the finished group as stale.
    const pulled = await dropping.as("trainer").getRolloutData();
    expect(pulled.data.meta_info.finished_groups).toEqual(["g1"]);
    expect(pulled.data.data[0]!.extra_info["weight_version"]).toBe(10);

    const pacing = await buffered(2);
    await pacing.as("operator").configureBuffer({ staleness_policy: "pace", max_staleness: 2, rollouts_per_version: 4 });
    await pacing.as("trainer").updateEngineStatus({ engine_status: "ENGINE.OFFLINE", weight_version: 10 });
    const w = pacing.as("client");
    expect(await w.postSteps({ steps: [step("s1", "g1", 0, 1)] })).toMatchObject({ accepted: 1 });
    // Not taken as version 0, which paced every new group out (503 paced).
    expect(await w.postSteps({ steps: [step("s2", "g2", 0, 1)] })).toMatchObject({ accepted: 1 });
    // A row that names its version keeps it.
    expect(await w.postSteps({ steps: [step("s3", "g2", 0, 1, false, { weight_version: 9 })] })).toMatchObject({ accepted: 1 });
    const groups = await runInDurableObject(pacing.stub, (_i: EngineObject, state) => state.storage.sql.exec<{ group_id: string; min_weight_version: number }>("SELECT group_id, min_weight_version FROM buf_groups ORDER BY group_id").toArray());
    expect(groups).toEqual([
      { group_id: "g1", min_weight_version: 10 },
      { group_id: "g2", min_weight_version: 9 },
    ]);
  });

  it("judges a group by the versions it hands out: an abandoned session's old step, cleared at delivery, does not make it stale", async () => {
    for (const policy of ["flag", "drop"] as const) {
      const e = await buffered(2);
      const trainer = e.as("trainer");
      await e.as("operator").configureBuffer({ max_staleness: 1, staleness_policy: policy });
      await e.as("client").postSteps({ steps: [step("abandoned", "g", 0, 0, false, { weight_version: 0 })] });
      await e.as("client").postSteps({ steps: [step("s1", "g", 0, 1, true, { weight_version: 5 }), step("s2", "g", 0, 1, true, { weight_version: 5 })] });
      await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 5 });
      const pulled = await trainer.getRolloutData();
      expect(pulled.data.data.map((i) => i.extra_info["weight_version"])).toEqual([5, 5]);
      expect(pulled.data.meta_info).toMatchObject({ finished_groups: ["g"], stale_groups: [], groups: [{ group_id: "g", oldest_weight_version: 5, lag_versions: 0 }] });
    }
  });

  it("does not count groups dropped as stale toward max_groups: the pull hands out the fresh ones behind them", async () => {
    const e = await buffered(1);
    const trainer = e.as("trainer");
    await e.as("operator").configureBuffer({ staleness_policy: "drop", max_staleness: 1 });
    await e.as("client").postSteps({ steps: [step("o1", "old1", 0, 1, true, { weight_version: 0 }), step("o2", "old2", 0, 1, true, { weight_version: 1 })] });
    await e.as("client").postSteps({ steps: [step("f1", "fresh1", 0, 1, true, { weight_version: 5 }), step("f2", "fresh2", 0, 1, true, { weight_version: 4 })] });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 5 });
    const pulled = await trainer.getRolloutData({ max_groups: 1 });
    expect({ success: pulled.success, groups: pulled.data.meta_info.finished_groups }).toEqual({ success: true, groups: ["fresh1"] });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ ready_groups: 1, dropped_groups: 2, delivered_groups: 1 });
    expect((await trainer.getRolloutData({ max_groups: 1 })).data.meta_info.finished_groups).toEqual(["fresh2"]);
  });

  it("shows the last pull's groups in /health, the most lagging first", async () => {
    const e = await buffered(1);
    const trainer = e.as("trainer");
    expect((await e.as("viewer").health()).buffer.last_pull).toBeNull();
    await e.as("client").postSteps({ steps: [step("s1", "fresh", 0, 1, true, { weight_version: 4 }), step("s2", "old", 0, 1, true, { weight_version: 1 })] });
    await advance(e, 3_000);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.OFFLINE", weight_version: 5 });
    await trainer.getRolloutData();
    const last = (await e.as("viewer").health()).buffer.last_pull;
    expect(last).toMatchObject({ cursor: 1, consumer_weight_version: 5, group_count: 2 });
    expect(last!.groups.map((g) => [g.group_id, g.lag_versions, g.oldest_weight_version, g.queued_seconds])).toEqual([
      ["old", 4, 1, 3],
      ["fresh", 1, 4, 3],
    ]);
  });

  it("holds AgentJet claims back under pace while the claims under way could be consumed too late, with a cause the client retries on", async () => {
    const e = await createEngine("pace-claims");
    await e.as("operator").configureBuffer({ staleness_policy: "pace", max_staleness: 1, rollouts_per_version: 2 });
    await rollingWith(e, 8);
    const trainer = e.as("trainer");
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 0 });
    const client = e.as("client");
    const claim = (id: string) => client.claimEpisode({ client_uuid: id, discard_episode_timeout: 600 });
    // Four under way can all be consumed within one version of the oldest's; a fifth could not.
    const held = [];
    for (const id of ["a", "b", "c", "d"]) held.push(await claim(id));
    expect(held.every((c) => c.success)).toBe(true);
    const refused = await claim("e");
    expect(refused).toMatchObject({ success: false, episode_uuid: "" });
    expect(refused.fail_cause.startsWith("No available episodes to claim.")).toBe(true);
    // The trainer moved on: the oldest already lags one version, so nothing more begins until it is consumed.
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 1 });
    await client.endEpisode(endBody("a", held[0]!.episode_uuid, 1, "t"));
    await client.endEpisode(endBody("b", held[1]!.episode_uuid, 1, "t"));
    expect((await claim("e")).success).toBe(false);
    await client.endEpisode(endBody("c", held[2]!.episode_uuid, 1, "t"));
    await client.endEpisode(endBody("d", held[3]!.episode_uuid, 1, "t"));
    expect((await claim("e")).success).toBe(true);
    expect((await e.as("viewer").health()).buffer.paced_refusals).toBe(2);
    // Eval claims are not training data: never paced.
    expect((await client.claimEpisode({ client_uuid: "ev", episode_type: "eval", discard_episode_timeout: 600 })).success).toBe(true);
  });

  it("counts the claims of one turn still signing their keys as under way: pace lets no more begin together than one at a time", async () => {
    const e = await createEngine("pace-claims-together");
    await e.as("operator").configureBuffer({ staleness_policy: "pace", max_staleness: 1, rollouts_per_version: 2 });
    await rollingWith(e, 8);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 0 });
    // Six claims in one shared turn: each is checked while the ones before it are signing, not written yet.
    const won = await runInDurableObject(e.stub, async (instance: EngineObject) => {
      const claims = await Promise.all(
        ["a", "b", "c", "d", "e", "f"].map((c) => instance.claimEpisode({ admin: true }, { client_uuid: c, episode_type: "train", discard_episode_timeout: 600 }, ORIGIN)),
      );
      return claims.map((r) => r.ok && r.body.success);
    });
    // As one at a time: four under way can all be consumed within one version of the oldest's.
    expect(won).toEqual([true, true, true, true, false, false]);
    expect(await engineStats(e)).toMatchObject({ claimed: 4, registered: 4 });
  });

  it("takes a worker's whole-group batch too big for the bound once nothing else is outstanding, instead of refusing it for ever", async () => {
    const e = await buffered(8);
    const trainer = e.as("trainer");
    await e.as("operator").configureBuffer({ staleness_policy: "pace", max_staleness: 0, rollouts_per_version: 4 });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 0 });
    const group = (id: string) => ({ steps: Array.from({ length: 8 }, (_, i) => step(`${id}-s${i}`, id, 0, 1, true)) });
    const post = (id: string) => raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify(group(id)) });
    // Eight sessions begun together break max_staleness 0 at 4 per version on their own: taken into an empty buffer.
    expect(await post("g1")).toMatchObject({ status: 200, json: { accepted: 8, groups_ready: ["g1"] } });
    // The next waits while g1 is outstanding, and is taken once the trainer consumed it.
    expect(await post("g2")).toMatchObject({ status: 503, json: { error: "paced" } });
    expect((await trainer.getRolloutData()).data.meta_info.finished_groups).toEqual(["g1"]);
    expect(await post("g2")).toMatchObject({ status: 200, json: { accepted: 8 } });
    expect((await e.as("viewer").health()).buffer.paced_refusals).toBe(1);
  });

  it("keeps every AgentJet rollout pace let begin: its end joins a new group even when pace would refuse a worker's batch opening one", async () => {
    const e = await createEngine("pace-ends");
    const trainer = e.as("trainer");
    await trainer.startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
    await e.as("operator").configureBuffer({ staleness_policy: "pace", max_staleness: 1, rollouts_per_version: 2 });
    await rollingWith(e, 2);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 0 });
    const client = e.as("client");
    const a = await client.claimEpisode({ client_uuid: "a", discard_episode_timeout: 600 });
    const b = await client.claimEpisode({ client_uuid: "b", discard_episode_timeout: 600 });
    expect(a.success && b.success).toBe(true);
    // The trainer moves on while both run: each end opens its task's group, which pace would refuse a worker.
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 2 });
    expect(await client.endEpisode(endBody("a", a.episode_uuid, 1, "t1"))).toMatchObject({ success: true });
    expect(await client.endEpisode(endBody("b", b.episode_uuid, 1, "t2"))).toMatchObject({ success: true });
    const health = (await e.as("viewer").health()).buffer;
    expect({ ready: health.ready_groups, paced: health.paced_refusals }).toEqual({ ready: 2, paced: 0 });
    expect((await trainer.getRolloutData()).data.meta_info.finished_groups).toEqual(["t1", "t2"]);
  });

  it("holds claims back from the batch size an AgentJet client's throttle_policy names, when nothing else says it", async () => {
    const e = await createEngine("pace-throttle");
    await e.as("operator").configureBuffer({ staleness_policy: "pace", max_staleness: 0 });
    await rollingWith(e, 4);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 3 });
    const claim = (id: string, policy?: { expected_batch_size: number; expected_num_repeat: number }) =>
      e.as("client").claimEpisode({ client_uuid: id, discard_episode_timeout: 600, throttle_policy: policy ? { ...policy, current_task_id: "" } : null });
    const batch = { expected_batch_size: 1, expected_num_repeat: 2 };
    expect((await claim("a", batch)).success).toBe(true);
    expect((await claim("b", batch)).success).toBe(true);
    expect((await claim("c", batch)).success).toBe(false);
    // Without a batch size from anywhere, pace cannot tell a lag and holds nothing back.
    expect((await claim("d")).success).toBe(true);
  });

  it("refuses the rows of a batch that open new groups under pace (503), stores its rows of groups begun, and delivers stale groups rather than dropping them", async () => {
    const e = await buffered(2);
    await e.as("operator").configureBuffer({ staleness_policy: "pace", max_staleness: 1, rollouts_per_version: 2 });
    const trainer = e.as("trainer");
    await trainer.updateEngineStatus({ engine_status: "ENGINE.OFFLINE", weight_version: 0 });
    const w = e.as("client");
    await w.postSteps({ steps: [step("s1", "g1", 0, 1, true), step("s2", "g1", 0, 1), step("s3", "g2", 0, 1)] });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.OFFLINE", weight_version: 2 });
    const before = (await e.as("viewer").health()).buffer;
    // A new group alone: refused, nothing stored.
    await expect(w.postSteps({ steps: [step("s9", "g9", 0, 1)] })).rejects.toMatchObject({ status: 503, code: "paced", detail: expect.stringContaining("none of its rows that open a new group was stored") });
    expect((await e.as("viewer").health()).buffer).toEqual({ ...before, paced_refusals: 1 });
    // A worker's batch with the end of g1's last session and the start of a new group: the new
    // group waits, and g1 completes (held back with it, g1 would keep pace refusing for ever).
    const mixed = [step("s2", "g1", 1, 1, true), step("s9", "g9", 0, 1)];
    await expect(w.postSteps({ steps: mixed })).rejects.toMatchObject({ status: 503, code: "paced", detail: expect.stringMatching(/Its 1 row of groups already begun was stored: sent again, it is answered as a duplicate/) });
    let h = (await e.as("viewer").health()).buffer;
    expect({ pending: h.pending_groups, ready: h.ready_groups, paced: h.paced_refusals, duplicates: h.duplicate_rows }).toEqual({ pending: 1, ready: 1, paced: 2, duplicates: 0 });
    // Sent again while g2 still runs: still refused, its g1 row now a duplicate.
    await expect(w.postSteps({ steps: mixed })).rejects.toMatchObject({ status: 503, code: "paced" });
    h = (await e.as("viewer").health()).buffer;
    expect({ pending: h.pending_groups, ready: h.ready_groups, paced: h.paced_refusals, duplicates: h.duplicate_rows }).toEqual({ pending: 1, ready: 1, paced: 3, duplicates: 1 });
    // The groups already begun complete; their work is delivered, flagged stale, not dropped.
    await w.postSteps({ steps: [step("s4", "g2", 0, 1, true), step("s3", "g2", 1, 1, true)] });
    const pulled = await trainer.getRolloutData();
    expect(pulled.data.meta_info).toMatchObject({ finished_groups: ["g1", "g2"], stale_groups: ["g1", "g2"] });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ dropped_groups: 0, delivered_groups: 2 });
    // Nothing is waiting now: new groups are taken again, and the mixed batch sent once more is whole.
    expect(await w.postSteps({ steps: mixed })).toMatchObject({ accepted: 1, duplicates: 1 });
  });

  it("counts a rollout that ended as outstanding until the trainer consumed it, with the buffer or without (AgentJet over ZeroMQ)", async () => {
    for (const buffer of [true, false]) {
      const e = await createEngine(buffer ? "pace-ended-buf" : "pace-ended-zmq");
      if (buffer) await e.as("trainer").startRollout({ num_repeat_per_sample: 1, job_session: "j" });
      await e.as("operator").configureBuffer({ staleness_policy: "pace", max_staleness: 0, rollouts_per_version: 2 });
      await rollingWith(e, 4);
      const trainer = e.as("trainer");
      await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 0 });
      const client = e.as("client");
      const claim = (id: string) => client.claimEpisode({ client_uuid: id, discard_episode_timeout: 600, throttle_policy: { current_task_id: `task-${id}` } });
      const a = await claim("a");
      const b = await claim("b");
      expect(b.success).toBe(true);
      // The trainer takes two per version: a third begun at version 0 would be consumed at version 1.
      expect((await claim("c")).success).toBe(false);
      // a ended, but the trainer still waits for b to complete its batch of two.
      await client.endEpisode(endBody("a", a.episode_uuid, 1, "task-a"));
      expect((await claim("c")).success, buffer ? "buffer" : "zmq").toBe(false);
      // Once the trainer took its batch and moved on, what began before counts as consumed.
      await client.endEpisode(endBody("b", b.episode_uuid, 1, "task-b"));
      if (buffer) expect((await trainer.getRolloutData()).data.meta_info.total_samples).toBe(2);
      await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 1 });
      expect((await claim("c")).success).toBe(true);
    }
  });

  it("does not count a result the agent could not deliver under pace without the buffer: the trainer registers it again, and its batch can complete", async () => {
    const e = await createEngine("pace-undeliverable");
    const trainer = e.as("trainer");
    const client = e.as("client");
    await e.as("operator").configureBuffer({ staleness_policy: "pace", max_staleness: 0, rollouts_per_version: 2 });
    await rollingWith(e, 2, { zmq: true });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 0 });
    const a = await client.claimEpisode({ client_uuid: "a", discard_episode_timeout: 600 });
    const b = await client.claimEpisode({ client_uuid: "b", discard_episode_timeout: 600 });
    expect(a.success && b.success).toBe(true);
    expect((await client.endEpisode(endBody("a", a.episode_uuid, 1))).success).toBe(true);
    expect((await client.endEpisode(endBody("b", b.episode_uuid, 1))).success).toBe(true);
    const { commands } = await trainer.pollCommands();
    const deliver = (uuid: string) => commands.find((c) => c.body.kind === "deliver" && c.body.episode_uuid === uuid)!;
    await trainer.ackCommand({ seq: deliver(a.episode_uuid).seq, ok: true });
    await trainer.ackCommand({ seq: deliver(b.episode_uuid).seq, ok: false, detail: "runner gone: no ack in 30 s" });
    // The trainer has one of its two results; told b is not claimed, it registers b again.
    expect((await trainer.isEpisodeClaimed({ episode_uuid: b.episode_uuid })).success).toBe(false);
    expect((await trainer.registerEpisode({ episode_uuid: b.episode_uuid, openai_base_url: "http://trainer.internal:8000/v1", openai_api_key: "k", zmq_listen_result_addr: "tcp://10.0.0.1:20001" })).success).toBe(true);
    // Two per version at max_staleness 0, one consumed at version 0: the one it still needs may begin.
    const again = await client.claimEpisode({ client_uuid: "c", discard_episode_timeout: 600 });
    expect(again, JSON.stringify(again)).toMatchObject({ success: true });
  });

  it("stops weighing a pending group that got no row for the TTL (or the default TTL when it is off): a worker that died does not hold new groups back for ever", async () => {
    const e = await buffered(2);
    const trainer = e.as("trainer");
    await e.as("operator").configureBuffer({ staleness_policy: "pace", max_staleness: 1, rollouts_per_version: 2, ttl_seconds: 0 });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 0 });
    const post = (rows: Row[]) => raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify({ steps: rows }) });
    // g0's first session begins and its worker dies; g1 completes at version 0 and is consumed.
    expect((await post([step("dead", "g0", 0, 1, false, { weight_version: 0 })])).status).toBe(200);
    expect((await post([step("a1", "g1", 0, 1, true), step("a2", "g1", 0, 1, true)])).status).toBe(200);
    expect((await trainer.getRolloutData()).data.meta_info.finished_groups).toEqual(["g1"]);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 1 });
    const next = [step("b1", "g2", 0, 1, true, { weight_version: 1 }), step("b2", "g2", 0, 1, true, { weight_version: 1 })];
    // While g0 may still be under way, its old version holds new groups back.
    expect(await post(next)).toMatchObject({ status: 503, json: { error: "paced" } });
    await advance(e, 1800 * 1000 - 1);
    expect(await post(next)).toMatchObject({ status: 503, json: { error: "paced" } });
    // Silent for the default TTL: no longer weighed, though kept (the TTL is off).
    await advance(e, 1);
    expect(await post(next)).toMatchObject({ status: 200, json: { accepted: 2, groups_ready: ["g2"] } });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 1, dropped_groups: 0 });
  });

  it("measures the rollouts the trainer takes per weight version from its pulls", async () => {
    const e = await buffered(1);
    const trainer = e.as("trainer");
    const w = e.as("client");
    await trainer.updateEngineStatus({ engine_status: "ENGINE.OFFLINE", weight_version: 0 });
    for (const s of ["a", "b", "c"]) await w.postSteps({ steps: [step(s, `g-${s}`, 0, 1, true)] });
    await trainer.getRolloutData({ max_groups: 2 });
    await trainer.getRolloutData({ max_groups: 1 });
    expect((await e.as("viewer").health()).buffer.measured_rollouts_per_version).toBeNull();
    await trainer.updateEngineStatus({ engine_status: "ENGINE.OFFLINE", weight_version: 1 });
    await trainer.getRolloutData();
    expect((await e.as("viewer").health()).buffer.measured_rollouts_per_version).toBe(3);
  });
});

describe("rows and sessions once their group is decided", () => {
  it("counts a retried batch that lands after its group was delivered as duplicates, and only new rows as late", async () => {
    const e = await buffered(1);
    const batch = { steps: [step("s1", "g1", 0, 0.5), step("s1", "g1", 1, 1, true)] };
    await e.as("client").postSteps(batch);
    expect((await e.as("trainer").getRolloutData()).data.meta_info.finished_groups).toEqual(["g1"]);
    expect(await e.as("client").postSteps(batch)).toEqual({ success: true, accepted: 0, duplicates: 2, late: 0, groups_ready: [] });
    expect(await e.as("client").postSteps({ steps: [step("s1", "g1", 2, 1), step("s2", "g1", 0, 1, true)] })).toMatchObject({ accepted: 0, duplicates: 0, late: 2 });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ duplicate_rows: 2, late_rows_ignored: 2 });
  });

  it("counts a retried batch that lands after its group was dropped as duplicates, and asks to clear nothing more", async () => {
    const e = await buffered(2);
    await e.as("operator").configureBuffer({ ttl_seconds: 60 });
    const batch = { steps: [step("s1", "g1", 0, 1, true)] };
    await e.as("client").postSteps(batch);
    await advance(e, 60_000);
    expect(await e.as("client").postSteps(batch)).toMatchObject({ accepted: 0, duplicates: 1, late: 0 });
    const { commands } = await e.as("trainer").pollCommands();
    expect(commands.map((c) => c.body).filter((b) => b.kind === "clear_sessions")).toEqual([{ kind: "clear_sessions", session_ids: ["s1"], group_ids: ["g1"], reason: "incomplete_group_ttl" }]);
  });

  it("keeps a session in its group after the group's pull is no longer kept, and after a drop", async () => {
    const e = await buffered(1);
    await e.as("operator").configureBuffer({ ttl_seconds: 60 });
    await e.as("client").postSteps({ steps: [step("s1", "g1", 0, 1, true)] });
    await e.as("trainer").getRolloutData();
    // KEPT_PULLS more pulls: g1's pull, its steps, are forgotten.
    for (let i = 0; i < 4; i++) {
      await e.as("client").postSteps({ steps: [step(`x${i}`, `x${i}`, 0, 1, true)] });
      await e.as("trainer").getRolloutData();
    }
    const moved = await raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify({ steps: [step("s1", "g2", 1, 1, true)] }) });
    expect(moved).toMatchObject({ status: 422, json: { error: "invalid_request", detail: "steps.0: session s1 belongs to group g1, not g2" } });

    await e.as("operator").configureBuffer({ group_size: 2 });
    await e.as("client").postSteps({ steps: [step("d1", "doomed", 0, 1, true)] });
    await advance(e, 60_000);
    const fled = await raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify({ steps: [step("d1", "elsewhere", 1, 1, true)] }) });
    expect(fled).toMatchObject({ status: 422, json: { detail: "steps.0: session d1 belongs to group doomed, not elsewhere" } });
  });

  /** Delivers `row`'s group, then KEPT_PULLS more pulls, so its pull is no longer kept and its steps go. */
  async function deliverThenPushOut(e: TestEngine, row: Row): Promise<void> {
    await e.as("client").postSteps({ steps: [row] });
    await e.as("trainer").getRolloutData();
    for (let i = 1; i <= KEPT_PULLS; i++) {
      await e.as("client").postSteps({ steps: [step(`x${i}`, `x${i}`, 0, 1, true)] });
      await e.as("trainer").getRolloutData();
    }
  }

  it("forgets a decided group's sessions SESSION_MEMORY_MS after its steps went, by the alarm", async () => {
    const e = await buffered(1);
    await deliverThenPushOut(e, step("s1", "g1", 0, 1, true));
    const sessionsOf = (group: string) =>
      runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM buf_sessions WHERE group_id = ?", group).one().n);
    await advance(e, SESSION_MEMORY_MS - 1);
    expect(await sessionsOf("g1")).toBe(1);
    await advance(e, 1);
    expect(await sessionsOf("g1")).toBe(0);
    // Its pull is still kept: the later groups' sessions stay.
    expect(await sessionsOf("x4")).toBe(1);
    expect(await e.as("client").postSteps({ steps: [step("s1", "g9", 0, 1, true)] })).toMatchObject({ accepted: 1, groups_ready: ["g9"] });
  });

  it("keeps both lives of a reused session id in D1: the new group's steps are written beside the old ones", async () => {
    const e = await buffered(1);
    await deliverThenPushOut(e, step("s1", "g1", 0, 0.25, true));
    await advance(e, SESSION_MEMORY_MS);
    expect(await e.as("client").postSteps({ steps: [step("s1", "g9", 0, 0.75, true)] })).toMatchObject({ accepted: 1, groups_ready: ["g9"] });
    await advance(e, 5_000);
    const rows = await env.DB.prepare("SELECT group_id, reward FROM buffer_steps WHERE engine = ? AND session_id = 's1' ORDER BY group_id").bind(e.name).all();
    expect(rows.results).toEqual([
      { group_id: "g1", reward: 0.25 },
      { group_id: "g9", reward: 0.75 },
    ]);
  });
});

describe("retention of decided groups", () => {
  const rowsOf = (e: TestEngine) =>
    runInDurableObject(e.stub, (_i, state) => {
      const n = (sql: string) => state.storage.sql.exec<{ n: number }>(sql).one().n;
      return {
        decided: n("SELECT COUNT(*) AS n FROM buf_groups WHERE state IN ('delivered', 'dropped') AND pull_cursor IS NULL"),
        kept: n("SELECT COUNT(*) AS n FROM buf_groups WHERE pull_cursor IS NOT NULL"),
        sessions: n("SELECT COUNT(*) AS n FROM buf_sessions"),
      };
    });

  it("deletes a decided group's row with its sessions, in batches of the alarm, and a row naming it later starts a new group", async () => {
    const e = await buffered(1);
    await e.as("operator").configureBuffer({ ttl_seconds: 5 });
    // 501 groups delivered in one pull, one left open to be dropped by the TTL.
    const many = Array.from({ length: 501 }, (_, i) => step(`s${i}`, `g${i}`, 0, 1, true));
    await e.as("client").postSteps({ steps: [...many, step("open", "lost", 0, 0)] });
    expect((await e.as("trainer").getRolloutData()).data.meta_info.finished_groups).toHaveLength(501);
    await advance(e, 5_000);
    // KEPT_PULLS more pulls: the first pull is no longer kept, and its groups' steps go.
    for (let i = 0; i < 4; i++) {
      await e.as("client").postSteps({ steps: [step(`x${i}`, `x${i}`, 0, 1, true)] });
      await e.as("trainer").getRolloutData();
    }
    expect(await rowsOf(e)).toEqual({ decided: 502, kept: 4, sessions: 506 });
    await advance(e, SESSION_MEMORY_MS - 1);
    expect(await rowsOf(e)).toEqual({ decided: 502, kept: 4, sessions: 506 });
    // One alarm forgets at most 500 groups, rows and sessions, then re-arms at once for the rest.
    await advance(e, 1);
    expect(await rowsOf(e)).toEqual({ decided: 2, kept: 4, sessions: 6 });
    await advance(e, 0);
    expect(await rowsOf(e)).toEqual({ decided: 0, kept: 4, sessions: 4 });
    // A retry of a delivered group's row, this long after, is not known any more: like a
    // session, a group id is free once its memory ended, and the row starts a new group,
    // delivered on its own. A row for the dropped group starts a new pending one, not a late row.
    expect(await e.as("client").postSteps({ steps: [step("s0", "g0", 0, 1, true)] })).toEqual({ success: true, accepted: 1, duplicates: 0, late: 0, groups_ready: ["g0"] });
    expect(await e.as("client").postSteps({ steps: [step("open", "lost", 1, 0)] })).toMatchObject({ accepted: 1, late: 0 });
    const again = await e.as("trainer").getRolloutData();
    expect(again.data.meta_info.finished_groups).toEqual(["g0"]);
    expect(again.data.data.map((i) => i.extra_info["session_id"])).toEqual(["s0"]);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 1, delivered_groups: 506, dropped_groups: 1, late_rows_ignored: 0 });
  });
});

describe("AgentJet trajectories join groups by task_id", () => {
  it("turns each ended train episode into a completed session of its task's group", async () => {
    const e = await buffered(2);
    await rollingWith(e, 2);
    const client = e.as("client");
    for (const id of ["c1", "c2"]) {
      const c = await client.claimEpisode({ client_uuid: id, discard_episode_timeout: 60 });
      await client.endEpisode(endBody(id, c.episode_uuid, id === "c1" ? 1 : 0, "task-7"));
    }
    const pulled = await e.as("trainer").getRolloutData();
    expect(pulled.data.meta_info).toMatchObject({ finished_groups: ["task-7"], total_samples: 2, avg_reward: 0.5 });
    expect(pulled.data.data[0]?.extra_info).toMatchObject({ source: "agentjet", client_uuid: "c1", session_id: "ep-0#1" });
  });

  it("counts a failed_infra end, an abort and a reap as failed sessions of the task's group, and completes it on usable ones", async () => {
    const e = await buffered(2);
    await rollingWith(e, 5);
    const client = e.as("client");
    const claim = (id: string, timeout = 60) => client.claimEpisode({ client_uuid: id, discard_episode_timeout: timeout, throttle_policy: { current_task_id: "t" } });
    const a = await claim("infra");
    await client.endEpisode(endBody("infra", a.episode_uuid, 0, "t", { workflow_output: { reward: 0, is_success: false, metadata: { task_id: "t", failed_infra: true }, log_metrics: {} } }));
    const b = await claim("aborter");
    await client.abortEpisode({ ...endBody("aborter", b.episode_uuid, 0, ""), workflow_output: { reward: 0, is_success: null, metadata: { task_id: "" }, log_metrics: {} } });
    await claim("silent", 5);
    await advance(e, 5_000);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 1, ready_groups: 0, failed_sessions: 3 });
    for (const id of ["ok1", "ok2"]) {
      const c = await claim(id);
      await client.endEpisode(endBody(id, c.episode_uuid, 1, "t"));
    }
    const pulled = await e.as("trainer").getRolloutData();
    expect(pulled.data.data.map((i) => [i.extra_info["client_uuid"], i.extra_info["usable"]])).toEqual([
      ["ok1", true],
      ["ok2", true],
    ]);
    expect(pulled.data.meta_info.groups).toMatchObject([{ group_id: "t", usable_sessions: 2, failed_sessions: 3 }]);
  });
  it("starts a task's next group once its last was decided: a task back in a later batch is delivered again, under its task id, also after a restart", async () => {
    const e = await buffered(2);
    const trainer = e.as("trainer");
    const client = e.as("client");
    const batch = async (prefix: string, version: number, clients: string[]) => {
      await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
      await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: version, global_step: version });
      await rollingWith(e, 2, { prefix, step: version });
      for (const id of clients) {
        const c = await client.claimEpisode({ client_uuid: id, discard_episode_timeout: 600, throttle_policy: { current_task_id: "t1" } });
        expect(await client.endEpisode(endBody(id, c.episode_uuid, 1, "t1"))).toEqual({ success: true });
      }
      return trainer.getRolloutData();
    };
    expect((await batch("b1", 0, ["a", "b"])).data.meta_info.finished_groups).toEqual(["t1"]);
    // The next epoch's rollouts of t1 are a group of their own, not late rows of the delivered one.
    const second = await batch("b2", 1, ["c", "d"]);
    expect(second.data.meta_info).toMatchObject({ finished_groups: ["t1#2"], total_samples: 2, groups: [{ group_id: "t1#2", oldest_weight_version: 1 }] });
    expect(second.data.data.map((i) => [i.instance_id, i.extra_info["task_id"], i.extra_info["client_uuid"]])).toEqual([
      ["t1#2", "t1", "c"],
      ["t1#2", "t1", "d"],
    ]);
    // The task's generation is the engine's state: a restart carries on from it.
    await expect(runInDurableObject(e.stub, (_i, state) => state.abort("restart"))).rejects.toThrow();
    await reconnect(e);
    expect((await batch("b3", 2, ["e", "f"])).data.meta_info.finished_groups).toEqual(["t1#3"]);
    expect((await e.as("viewer").health()).buffer).toMatchObject({ late_rows_ignored: 0, delivered_groups: 3 });
  });

  it("names a task's later group apart from a group that already holds the name", async () => {
    const e = await buffered(1);
    await rollingWith(e, 2);
    const client = e.as("client");
    // A worker's group holds the name t#2 already.
    await client.postSteps({ steps: [step("w", "t#2", 0, 1)] });
    const end = async (id: string) => {
      const c = await client.claimEpisode({ client_uuid: id, discard_episode_timeout: 600 });
      await client.endEpisode(endBody(id, c.episode_uuid, 1, "t"));
      return e.as("trainer").getRolloutData();
    };
    expect((await end("a")).data.meta_info.finished_groups).toEqual(["t"]);
    expect((await end("b")).data.meta_info.finished_groups).toEqual(["t#3"]);
  });

  it("starts a task's first group apart from a worker's pending group named like the task, which carries on as the worker's", async () => {
    const e = await buffered(1);
    await rollingWith(e, 1);
    const client = e.as("client");
    // A worker's rollout of its group "t" is under way.
    expect(await client.postSteps({ steps: [step("w1", "t", 0, 0)] })).toMatchObject({ accepted: 1 });
    const c = await client.claimEpisode({ client_uuid: "a", discard_episode_timeout: 600 });
    expect(await client.endEpisode(endBody("a", c.episode_uuid, 1, "t"))).toEqual({ success: true });
    // Not into the worker's group: prompts of two tasks under one instance_id would share their advantages.
    expect((await e.as("trainer").getRolloutData()).data.meta_info.finished_groups).toEqual(["t#2"]);
    // The worker's next row is taken, not ignored as late.
    expect(await client.postSteps({ steps: [step("w1", "t", 1, 1, true)] })).toMatchObject({ accepted: 1, late: 0 });
    expect((await e.as("trainer").getRolloutData()).data.meta_info.finished_groups).toEqual(["t"]);
  });
});

describe("AgentJet's views report failed rollouts per task, apart from rewards", () => {
  it("lists failed_infra ends, aborts and reaps per task in the pool view and the completed tasks, without counting their rewards", async () => {
    const e = await createEngine("failed-view");
    await rollingWith(e, 6, { step: 3 });
    const client = e.as("client");
    const claim = (id: string, task: string, timeout = 60) => client.claimEpisode({ client_uuid: id, discard_episode_timeout: timeout, throttle_policy: { current_task_id: task } });
    const infra = await claim("c-infra", "t1");
    await client.endEpisode(endBody("c-infra", infra.episode_uuid, 0.9, "t1", { workflow_output: { reward: 0.9, is_success: false, metadata: { task_id: "t1", failed_infra: true }, log_metrics: {} } }));
    const good = await claim("c-good", "t1");
    await client.endEpisode(endBody("c-good", good.episode_uuid, 0.5, "t1"));
    const aborted = await claim("c-abort", "t2");
    await client.abortEpisode(endBody("c-abort", aborted.episode_uuid, 0, ""));
    const reaped = await claim("c-reap", "t2", 5);
    await advance(e, 5_000);
    const pool = await e.as("trainer").getPoolInfo();
    expect(pool.failed_tasks).toEqual({
      t1: { failed_infra: 1, aborted: 0, reaped: 0, episode_uuids: [infra.episode_uuid] },
      t2: { failed_infra: 0, aborted: 1, reaped: 1, episode_uuids: [aborted.episode_uuid, reaped.episode_uuid] },
    });
    // Only the usable end is a completed rollout of its task.
    expect(pool.completed_tasks_client_uuids).toEqual({ t1: ["c-good"] });
    const tasks = await e.as("viewer").completedTasks();
    expect(tasks.tasks).toEqual([
      { task_id: "t1", episodes: 1, clients: 1, mean_reward: 0.5, failed: 1 },
      { task_id: "t2", episodes: 0, clients: 0, mean_reward: null, failed: 2 },
    ]);
    // The failed end's reward is not in the step's history.
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 4 });
    expect((await e.as("viewer").getRewardHistory()).history).toMatchObject([{ global_step: 3, mean_reward: 0.5 }]);
    // What the trainer posts for failed_tasks is ignored, as for the other computed fields.
    await e.as("trainer").updatePoolInfo({ failed_tasks: { bogus: { failed_infra: 9, aborted: 0, reaped: 0, episode_uuids: [] } } });
    expect(Object.keys((await e.as("trainer").getPoolInfo()).failed_tasks)).toEqual(["t1", "t2"]);
    // A rolling phase that ends clears them with the episodes.
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    expect((await e.as("trainer").getPoolInfo()).failed_tasks).toEqual({});
  });

  it("lists an abort under the task its body names when its claim named none, as an end; the claim's own task comes first", async () => {
    // A client that claims without a throttle_policy (the TypeScript abortClaim) names its task
    // when it gives the claim back: the abort was counted under no task, so the trainer never
    // saw the task needed re-registering.
    const e = await createEngine("abort-task");
    await rollingWith(e, 2);
    const client = e.as("client");
    const untagged = await client.claimEpisode({ client_uuid: "c-1", discard_episode_timeout: 60 });
    await client.abortEpisode(endBody("c-1", untagged.episode_uuid, 0, "t1"));
    const tagged = await client.claimEpisode({ client_uuid: "c-2", discard_episode_timeout: 60, throttle_policy: { current_task_id: "t2" } });
    await client.abortEpisode(endBody("c-2", tagged.episode_uuid, 0, ""));
    expect((await e.as("viewer").getPoolInfo()).failed_tasks).toEqual({
      t1: { failed_infra: 0, aborted: 1, reaped: 0, episode_uuids: [untagged.episode_uuid] },
      t2: { failed_infra: 0, aborted: 1, reaped: 0, episode_uuids: [tagged.episode_uuid] },
    });
  });
});

describe("records in D1", () => {
  it("keeps every step and every group outcome", async () => {
    const e = await buffered(1);
    await e.as("operator").configureBuffer({ ttl_seconds: 5 });
    await e.as("client").postSteps({ steps: [step("s1", "ok", 0, 1, true, { env_id: "math" }), step("s2", "lost", 0, 0)] });
    await e.as("trainer").getRolloutData();
    await advance(e, 5_000);
    await advance(e, 1_000);
    const steps = await env.DB.prepare("SELECT session_id, group_id, reward, extra FROM buffer_steps WHERE engine = ? ORDER BY session_id").bind(e.name).all();
    expect(steps.results).toEqual([
      { session_id: "s1", group_id: "ok", reward: 1, extra: JSON.stringify({ env_id: "math" }) },
      { session_id: "s2", group_id: "lost", reward: 0, extra: "{}" },
    ]);
    const groups = await env.DB.prepare("SELECT group_id, outcome, reason, stale, sessions, steps, pull_cursor FROM buffer_groups WHERE engine = ? ORDER BY seq").bind(e.name).all();
    expect(groups.results).toEqual([
      { group_id: "ok", outcome: "delivered", reason: "complete", stale: 0, sessions: 1, steps: 1, pull_cursor: 1 },
      { group_id: "lost", outcome: "dropped", reason: "incomplete_group_ttl", stale: 0, sessions: 1, steps: 1, pull_cursor: null },
    ]);
  });

  it("records a delivered group's oldest version as that of what it handed out, as its lag is: not an abandoned session's", async () => {
    const e = await buffered(2);
    const trainer = e.as("trainer");
    await e.as("client").postSteps({ steps: [step("abandoned", "g", 0, 0, false, { weight_version: 0 })] });
    await e.as("client").postSteps({ steps: [step("s1", "g", 0, 1, true, { weight_version: 5 }), step("s2", "g", 0, 1, true, { weight_version: 5 })] });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 5 });
    expect((await trainer.getRolloutData()).data.meta_info.groups).toMatchObject([{ group_id: "g", oldest_weight_version: 5, lag_versions: 0 }]);
    await advance(e, 5_000);
    const row = await env.DB.prepare("SELECT min_weight_version, consumer_weight_version, lag_versions FROM buffer_groups WHERE engine = ?").bind(e.name).first();
    expect(row).toEqual({ min_weight_version: 5, consumer_weight_version: 5, lag_versions: 0 });
  });

  it("gives each step row its group's run, also a row that arrives after a new run began", async () => {
    const e = await buffered(2);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING" });
    const client = e.as("client");
    await client.postSteps({ steps: [step("s1", "early", 0, 1, true), step("s2", "early", 0, 0)] });
    // Buffer groups are what this run holds: the operator's begin makes a new run, not a note on this one.
    expect(await e.as("operator").beginHistoryRun({ note: "new reward model" })).toEqual({ success: true, run: 2, new_run: true });
    await client.postSteps({ steps: [step("s2", "early", 1, 1, true), step("s3", "late", 0, 1, true), step("s4", "late", 0, 0, true)] });
    const inEngine = await runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec("SELECT group_id, run FROM buf_groups ORDER BY group_id").toArray());
    expect(inEngine).toEqual([
      { group_id: "early", run: 1 },
      { group_id: "late", run: 2 },
    ]);
    expect((await e.as("trainer").getRolloutData()).data.meta_info).toMatchObject({ finished_groups: ["early", "late"] });
    await advance(e, 5_000);
    const steps = await env.DB.prepare("SELECT session_id, step_index, group_id, run FROM buffer_steps WHERE engine = ? ORDER BY session_id, step_index").bind(e.name).all();
    expect(steps.results).toEqual([
      { session_id: "s1", step_index: 0, group_id: "early", run: 1 },
      { session_id: "s2", step_index: 0, group_id: "early", run: 1 },
      { session_id: "s2", step_index: 1, group_id: "early", run: 1 },
      { session_id: "s3", step_index: 0, group_id: "late", run: 2 },
      { session_id: "s4", step_index: 0, group_id: "late", run: 2 },
    ]);
    const groups = await env.DB.prepare("SELECT group_id, outcome, run FROM buffer_groups WHERE engine = ? ORDER BY seq").bind(e.name).all();
    expect(groups.results).toEqual([
      { group_id: "early", outcome: "delivered", run: 1 },
      { group_id: "late", outcome: "delivered", run: 2 },
    ]);
  });
});

describe("bad rows change nothing", () => {
  const cases: [string, unknown, number, RegExp][] = [
    ["a row without a group id", { steps: [{ ...step("s", "g", 0, 1), group_id: undefined }] }, 422, /steps.0.group_id/],
    ["a row without a session id", { steps: [{ ...step("s", "g", 0, 1), session_id: "" }] }, 422, /steps.0.session_id: must not be empty/],
    ["a negative step index", { steps: [step("s", "g", -1, 1)] }, 422, /steps.0.step_index: must not be negative/],
    ["a reward that is not a number", { steps: [{ ...step("s", "g", 0, 1), reward: "1.0" }] }, 422, /steps.0.reward/],
    ["a reward too large to average (avg_reward came out null)", { steps: [step("s", "g", 0, 1e308, true)] }, 422, /steps.0.reward: must be within ±/],
    ["an empty batch", { steps: [] }, 422, /at least one row/],
    ["oversized messages", { steps: [step("ok", "g", 0, 1), { ...step("s", "g", 0, 1), messages: [{ role: "user", content: "x".repeat(600_000) }] }] }, 413, /steps.1: messages and response are 600,\d{3} bytes of UTF-8; this engine takes at most 524,288 bytes per row \(max_message_bytes\)/],
    ["a session that changes group", { steps: [step("s", "g", 0, 1), step("s", "h", 1, 1)] }, 422, /session s belongs to group g, not h/],
  ];
  for (const [name, body, status, detail] of cases) {
    it(`refuses ${name}`, async () => {
      const e = await buffered(1);
      const before = await e.as("viewer").health();
      const res = await raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify(body) });
      expect(res.status).toBe(status);
      expect(String(res.json?.["detail"])).toMatch(detail);
      expect(await e.as("viewer").health()).toEqual(before);
    });
  }

  it("refuses an unknown engine and a viewer token", async () => {
    const e = await buffered(1);
    const body = JSON.stringify({ steps: [step("s", "g", 0, 1)] });
    expect((await raw(`/e/nope-nope/steps`, { token: e.tokens.client, body })).status).toBe(404);
    expect((await raw(`/e/${e.name}/steps`, { token: e.tokens.viewer, body })).status).toBe(403);
    expect((await raw(`/e/${e.name}/get_rollout_data`, { token: e.tokens.client, body: "{}" })).status).toBe(403);
  });
});

type OpenApiOperation = {
  responses: Record<string, unknown>;
  requestBody: { content: Record<string, { schema: { properties: Record<string, unknown> } }> };
};

describe("sizes, in bytes and within what the stores hold", () => {
  const post = (e: TestEngine, steps: Row[]) => raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify({ steps }) });

  it("counts max_message_bytes in bytes of UTF-8, not in characters", async () => {
    const e = await buffered(1);
    // 200 Ki characters of three bytes each: 600 KiB, over the default 512 KiB.
    const wide = await post(e, [{ ...step("s1", "g1", 0, 1, true), messages: [{ role: "user", content: "東".repeat(200 * 1024) }] }]);
    expect(wide.status).toBe(413);
    expect(wide.json).toMatchObject({ error: "payload_too_large", detail: expect.stringMatching(/^steps.0: messages and response are 614,\d{3} bytes of UTF-8; this engine takes at most 524,288 bytes per row \(max_message_bytes\)$/) });
    // 170 Ki of them (510 KiB) fit.
    const fits = await post(e, [{ ...step("s1", "g1", 0, 1, true), messages: [{ role: "user", content: "東".repeat(170 * 1024) }] }]);
    expect(fits.json).toMatchObject({ accepted: 1 });
  });

  it("refuses a max_message_bytes above what one stored row may take, and takes the most it may", async () => {
    const e = await buffered(1);
    const res = await raw(`/e/${e.name}/buffer/config`, { token: e.tokens.operator, body: JSON.stringify({ max_message_bytes: 3 * 1024 * 1024 }) });
    expect(res.status).toBe(413);
    expect(res.json).toEqual({ error: "payload_too_large", detail: expect.stringMatching(/^max_message_bytes: must be at most 1,900,000 bytes.*2,000,000 bytes per row\)$/) });
    // Just over the ceiling too, and with the token in the URL, as the document lists the route.
    const over = await raw(`/e/${e.name}/t/${e.tokens.operator}/buffer/config`, { body: JSON.stringify({ max_message_bytes: 1_900_001 }) });
    expect(over.status).toBe(413);
    expect(over.json).toMatchObject({ error: "payload_too_large", detail: expect.stringContaining("1,900,000 bytes") });
    // Below its floor it is the wrong shape, not a size: 422.
    expect((await raw(`/e/${e.name}/buffer/config`, { token: e.tokens.operator, body: JSON.stringify({ max_message_bytes: 10 }) })).status).toBe(422);
    expect((await e.as("viewer").health()).buffer.config.max_message_bytes).toBe(512 * 1024);
    expect((await e.as("operator").configureBuffer({ max_message_bytes: 1_900_000 })).max_message_bytes).toBe(1_900_000);
  });

  it("documents that refusal: /buffer/config lists 413, and max_message_bytes its ceiling", async () => {
    const doc = (await raw("/openapi.json")).json as { paths: Record<string, Record<string, OpenApiOperation>> };
    for (const path of ["/e/{engine}/buffer/config", "/e/{engine}/t/{token}/buffer/config"]) {
      const op = doc.paths[path]?.["post"];
      expect(op?.responses["413"]).toEqual({ $ref: "#/components/responses/Error413" });
      expect(op?.requestBody.content["application/json"]?.schema.properties["max_message_bytes"]).toMatchObject({ minimum: 1024, maximum: MAX_STORED_BYTES });
    }
  });

  it("reads a max_message_bytes stored above that ceiling as the ceiling", async () => {
    const e = await buffered(1);
    await runInDurableObject(e.stub, (_i, state) => {
      state.storage.sql.exec("UPDATE kv SET v = json_set(v, '$.max_message_bytes', 3145728) WHERE k = 'buffer_config'");
    });
    // As an engine that stored it before the ceiling reads it when it starts again.
    await expect(runInDurableObject(e.stub, (_i, state) => state.abort("restart"))).rejects.toThrow();
    await reconnect(e);
    expect((await e.as("viewer").health()).buffer.config.max_message_bytes).toBe(1_900_000);
  });

  it("refuses a row that would not fit the engine's records as they hold it, whatever max_message_bytes says", async () => {
    const e = await buffered(1);
    await e.as("operator").configureBuffer({ max_message_bytes: 1_900_000 });
    const before = await e.as("viewer").health();
    // Free-form fields do not count against max_message_bytes, but they are stored with the row.
    const extra = await post(e, [step("s1", "g1", 0, 1, false), { ...step("s1", "g1", 1, 1, true), notes: "x".repeat(1_950_000) }]);
    expect(extra.status).toBe(413);
    expect(extra.json).toMatchObject({
      error: "payload_too_large",
      detail: expect.stringMatching(/^steps.1 \(its messages, response and extra fields\) is 1,950,\d{3} bytes as stored; the limit is 1,900,000 bytes \(D1 and Durable Object storage hold 2,000,000 bytes per row\)$/),
    });
    // A million newlines are a million bytes, and two million escaped in the outbox's JSON.
    const escaped = await post(e, [{ ...step("s1", "g1", 0, 1, true), response: "\n".repeat(1_000_000) }]);
    expect(escaped.status).toBe(413);
    expect(String(escaped.json?.["detail"])).toMatch(/^steps.0 \(its messages, response and extra fields\) is 2,000,\d{3} bytes as stored/);
    expect(await e.as("viewer").health()).toEqual(before);
    expect((await engineStats(e)).outbox).toBe(0);
  });

  it("hands out at most 1000 groups in one pull, whatever max_groups asks", async () => {
    const e = await buffered(1);
    const rows = Array.from({ length: 1001 }, (_, i) => step(`s${i}`, `g${String(i).padStart(4, "0")}`, 0, 1, true));
    await e.as("client").postSteps({ steps: rows.slice(0, 1000) });
    await e.as("client").postSteps({ steps: rows.slice(1000) });
    const first = await e.as("trainer").getRolloutData({ max_groups: 5000 });
    expect(first.data.meta_info.finished_groups).toHaveLength(1000);
    expect((await e.as("trainer").getRolloutData({ max_groups: 5000 })).data.meta_info.finished_groups).toEqual(["g1000"]);
  });

  it("asks to clear a dropped group's sessions in commands small enough to store, however many there are", async () => {
    const e = await buffered(2);
    await e.as("operator").configureBuffer({ ttl_seconds: 60 });
    // 1400 session ids of 256 characters that JSON escapes to 6 bytes each: 2.1 MB of ids.
    const ids = Array.from({ length: 1400 }, (_, i) => "\u0001".repeat(250) + String(i).padStart(6, "0"));
    for (let i = 0; i < ids.length; i += 700) await e.as("client").postSteps({ steps: ids.slice(i, i + 700).map((id) => step(id, "crowded", 0, 0)) });
    await advance(e, 60_000);
    const { commands } = await e.as("trainer").pollCommands({ limit: 100 });
    const clears = commands.map((c) => c.body).filter((b) => b.kind === "clear_sessions");
    expect(clears.length).toBeGreaterThan(1);
    for (const c of clears) {
      expect(c).toMatchObject({ group_ids: ["crowded"], reason: "incomplete_group_ttl" });
      expect(utf8Bytes(JSON.stringify(c))).toBeLessThan(MAX_STORED_BYTES);
    }
    expect(clears.flatMap((c) => (c.kind === "clear_sessions" ? c.session_ids : []))).toEqual([...ids].sort());
  });
});

describe("a slime-style trainer loop", () => {
  it("runs start_rollout, then polls get_rollout_data with {} until success, step after step", async () => {
    const e = await createEngine("slime");
    const trainerUrl = `/e/${e.name}/t/${e.tokens.trainer}`;
    const workerUrl = `/e/${e.name}/t/${e.tokens.client}`;
    const start = await raw(`${trainerUrl}/start_rollout`, {
      body: JSON.stringify({ num_repeat_per_sample: 2, restart_training: false, job_session: "run-9", rollout_batch_size: 4, task_type: "aievobox" }),
    });
    expect(start).toMatchObject({ status: 200, json: { success: true, message: "Rollout started", job_session: "run-9", group_size: 2 } });
    for (let rolloutId = 0; rolloutId < 3; rolloutId++) {
      // The generator loop: empty answers until both sessions of the group are in.
      const empty = await raw(`${trainerUrl}/get_rollout_data`, { body: "{}" });
      expect(empty).toMatchObject({ status: 200, json: { success: false, data: { data: [] } } });
      const rows = [step(`r${rolloutId}-a`, `prompt-${rolloutId}`, 0, 0), step(`r${rolloutId}-a`, `prompt-${rolloutId}`, 1, 1, true), step(`r${rolloutId}-b`, `prompt-${rolloutId}`, 0, 0, true)];
      expect((await raw(`${workerUrl}/steps`, { body: JSON.stringify({ steps: rows }) })).status).toBe(200);
      const got = await raw(`${trainerUrl}/get_rollout_data`, { body: "{}" });
      expect(got.status).toBe(200);
      const data = got.json?.["data"] as { data: { uid: string; instance_id: string; reward: number }[]; meta_info: Record<string, unknown> };
      expect(got.json?.["success"]).toBe(true);
      expect(data.data.map((i) => [i.instance_id, i.reward])).toEqual([
        [`prompt-${rolloutId}`, 1],
        [`prompt-${rolloutId}`, 1],
        [`prompt-${rolloutId}`, 0],
      ]);
      expect(new Set(data.data.map((i) => i.uid)).size).toBe(3);
      expect(data.meta_info).toMatchObject({ total_samples: 3, finished_groups: [`prompt-${rolloutId}`] });
      await raw(`${trainerUrl}/update_engine_status`, { body: JSON.stringify({ engine_status: "ENGINE.WEIGHT_SYNCING", weight_version: rolloutId + 1 }) });
    }
    const health = await raw(`/e/${e.name}/health`, { token: e.tokens.viewer });
    expect(health).toMatchObject({ status: 200, json: { status: "healthy", buffer: { delivered_groups: 3, pending_groups: 0 } } });
  });
});

describe("the rollout buffer's own coercions (buffer_server.py)", () => {
  const pull = async (e: TestEngine, body: string) => {
    const r = await raw(`/e/${e.name}/get_rollout_data`, { token: e.tokens.trainer, body });
    return { status: r.status, groups: (r.json?.["data"] as { meta_info: { finished_groups: string[] } } | undefined)?.meta_info.finished_groups.length };
  };
  let made = 0;
  /** `n` ready groups of one session each, never made before. */
  const ready = async (e: TestEngine, n: number) => {
    const ids = Array.from({ length: n }, () => made++);
    await e.as("client").postSteps({ steps: ids.map((i) => step(`s${i}`, `g${i}`, 0, 1, true)) });
  };

  // slime's trainer posts max_groups as it has it: "2" (from config text), 2.7, or -1 for "all".
  // The seed did int(max_groups) in a try/except and treated <= 0 or unparsable as no limit
  // (buffer_server.py.txt:433-438). The Worker answered 422 for each.
  it("get_rollout_data takes max_groups \"2\", 2.7 and -1 as the seed's int() did", async () => {
    const e = await createEngine("py");
    for (const max_groups of ["2", 2.7, -1, "all"]) {
      const r = await raw(`/e/${e.name}/get_rollout_data`, { token: e.tokens.trainer, body: JSON.stringify({ max_groups }) });
      expect([max_groups, r.status]).toEqual([max_groups, 200]);
    }
    // As limits: "2" and 2.7 are two groups, true one (int(True)), -1 and "all" none.
    const b = await buffered(1);
    await ready(b, 7);
    const pulls = [];
    for (const max_groups of ["2", 2.7, " 1 ", true, -1]) pulls.push((await pull(b, JSON.stringify({ max_groups }))).groups);
    expect(pulls).toEqual([2, 2, 1, 1, 1]);
    await ready(b, 3);
    expect(await pull(b, '{"max_groups": "all"}')).toEqual({ status: 200, groups: 3 });
    // sys.maxsize, Python's usual "no limit", past what a JavaScript number holds exactly: was a 422.
    await ready(b, 2);
    expect(await pull(b, '{"max_groups": 9223372036854775807}')).toEqual({ status: 200, groups: 2 });
    await ready(b, 2);
    expect(await pull(b, '{"max_groups": "9223372036854775807"}')).toEqual({ status: 200, groups: 2 });
    // A cursor (the exchange's own) is still checked.
    expect((await pull(b, '{"cursor": "1"}')).status).toBe(422);
  });

  // A body that is not JSON, or JSON that is not an object (null, []): the seed read it as {}
  // (buffer_server.py.txt:427-432) and served the pull. The Worker answered 400 / 422.
  it("get_rollout_data with a body that is not a JSON object is a pull with no limit, as in the seed", async () => {
    const e = await createEngine("py");
    for (const body of ["null", "[]", "max_groups=2"]) {
      const r = await raw(`/e/${e.name}/get_rollout_data`, { token: e.tokens.trainer, body });
      expect([body, r.status]).toEqual([body, 200]);
    }
    const b = await buffered(1);
    for (const body of ["max_groups=2", "[2]", `${"[".repeat(200)}${"]".repeat(200)}`]) {
      await ready(b, 3);
      expect([body.slice(0, 12), await pull(b, body)]).toEqual([body.slice(0, 12), { status: 200, groups: 3 }]);
    }
  });

  // start_rollout: the seed did group_size = max(1, int(data.get("num_repeat_per_sample", 16))) and
  // restart_training by truthiness, job_session = str(...) (buffer_server.py.txt:528-539).
  // "8" and restart_training 1 from a launcher script: the Worker answered 422.
  it("start_rollout takes num_repeat_per_sample \"8\" and restart_training 1", async () => {
    const e = await createEngine("py");
    const r = await raw(`/e/${e.name}/start_rollout`, { token: e.tokens.trainer, body: JSON.stringify({ num_repeat_per_sample: "8", restart_training: 1 }) });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ group_size: 8 });
    const start = (body: Record<string, unknown>) => raw(`/e/${e.name}/start_rollout`, { token: e.tokens.trainer, body: JSON.stringify(body) });
    expect((await start({ num_repeat_per_sample: 2.7, job_session: 42 })).json).toMatchObject({ group_size: 2, job_session: "42" });
    expect((await start({ num_repeat_per_sample: 0, job_session: "" })).json).toMatchObject({ group_size: 1, job_session: expect.stringMatching(/.+/) });
    // restart_training by truthiness: 1 drops the pending groups, 0 keeps them.
    await e.as("client").postSteps({ steps: [step("s1", "g1", 0, 1)] });
    await start({ num_repeat_per_sample: 2, restart_training: 0, job_session: "j-0" });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 1 });
    await start({ num_repeat_per_sample: 2, restart_training: 1, job_session: "j-1" });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 0 });
    // What the seed's int() raised on is still refused, naming the field.
    for (const num_repeat_per_sample of ["eight", "2.5", null, [8]]) {
      const bad = await start({ num_repeat_per_sample });
      expect([num_repeat_per_sample, bad.status, String(bad.json?.["detail"])]).toEqual([num_repeat_per_sample, 422, expect.stringContaining("num_repeat_per_sample")]);
    }
  });
});
