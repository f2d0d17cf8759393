import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { ACKED_KEEP_MS, ADVISORY_KEEP_MS, type CommandQueue } from "../src/engine/command-queue";
import { migrateEngine } from "../src/engine/schema";
import { rewindSchema } from "./support/schema-rewind";
import type { EngineObject } from "../src/engine/engine-object";
import { admin, advance, createEngine, endBody, engineStats, raw, rollingWith } from "./support/harness";
import { MAX_REFUSALS } from "../src/protocol/agent";

describe("agent command channel", () => {
  it("queues start with the synced YAML, and stop, in order", async () => {
    const e = await createEngine();
    const op = e.as("operator");
    await op.syncTrainConfig("ajet:\n  backbone: verl\n");
    await op.startEngine();
    expect((await op.getEngineStatus()).engine_status).toBe("ENGINE.BOOTING");
    expect((await e.as("viewer").getPoolInfo()).booting_start_time).toBe(e.clock.t / 1000);
    await op.stopEngine();
    const { commands } = await e.as("trainer").pollCommands();
    expect(commands.map((c) => c.body)).toEqual([
      { kind: "start", yaml_as_string: "ajet:\n  backbone: verl\n" },
      { kind: "stop", reason: "stop_engine requested" },
    ]);
    expect(commands[0]!.seq).toBeLessThan(commands[1]!.seq);
  });

  it("redelivers an unacked command after its lease until it is acked; a second ack is harmless", async () => {
    const e = await createEngine();
    await rollingWith(e, 1, { zmq: true });
    const c = await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    await e.as("client").endEpisode(endBody("c", c.episode_uuid, 1));
    const trainer = e.as("trainer");
    const first = await trainer.pollCommands();
    expect(first.commands).toHaveLength(1);
    expect(first.commands[0]).toMatchObject({ attempt: 1, body: { kind: "deliver", episode_uuid: c.episode_uuid, fence: 1 } });
    expect(JSON.parse((first.commands[0]!.body as { payload: string }).payload)).toMatchObject({ reward: 1, metadata: { task_id: "task-1" } });
    // Leased: not handed out again before the deadline.
    expect((await trainer.pollCommands()).commands).toEqual([]);
    await advance(e, 59_000);
    expect((await trainer.pollCommands()).commands).toEqual([]);
    await advance(e, 1_000);
    const second = await trainer.pollCommands();
    expect(second.commands).toEqual([expect.objectContaining({ seq: first.commands[0]!.seq, attempt: 2 })]);
    await advance(e, 60_000);
    const third = await trainer.pollCommands();
    expect(third.commands[0]).toMatchObject({ seq: first.commands[0]!.seq, attempt: 3 });
    expect(await trainer.ackCommand({ seq: third.commands[0]!.seq, ok: true })).toEqual({ success: true, first_ack: true });
    expect(await trainer.ackCommand({ seq: third.commands[0]!.seq, ok: true })).toEqual({ success: true, first_ack: false });
    await advance(e, 120_000);
    expect((await trainer.pollCommands()).commands).toEqual([]);
  });

  it("long-polls: a waiting poll returns as soon as a command is queued", async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    const started = Date.now();
    const waiting = trainer.pollCommands({ wait: 20 });
    await e.as("operator").syncTrainConfig("x: 1\n");
    await e.as("operator").startEngine();
    const { commands } = await waiting;
    expect(commands.map((c) => c.body.kind)).toEqual(["start"]);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("returns an empty list when a long poll's wait runs out", async () => {
    const e = await createEngine();
    expect(await e.as("trainer").pollCommands({ wait: 0.2 })).toEqual({ incarnation: expect.any(String), commands: [] });
  });

  it("leaves nothing behind of long polls whose wait ran out", async () => {
    const e = await createEngine();
    for (let i = 0; i < 5; i++) expect(await e.as("trainer").pollCommands({ wait: 0.02, session: "agent-1" })).toEqual({ incarnation: expect.any(String), commands: [] });
    const waiting = await runInDurableObject(e.stub, (i: EngineObject) => (i as unknown as { channel: { pollWaiters: Set<unknown> } }).channel.pollWaiters.size);
    expect(waiting).toBe(0);
  });

  it("deletes at most 500 acked commands per alarm run, and runs again at once for the rest", async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    // 501 commands acked through the engine's own queue, then one more over HTTP, which arms the alarm.
    const direct = await runInDurableObject(e.stub, (i: EngineObject) => {
      const q = (i as unknown as { channel: { commands: CommandQueue } }).channel.commands;
      return Array.from({ length: 501 }, (_, k) => {
        const seq = q.enqueue({ kind: "scan_environments" }, e.clock.t + k);
        q.ack(seq, true, "done", e.clock.t + k);
        return seq;
      });
    });
    await e.as("operator").stopEngine();
    const [last] = (await trainer.pollCommands({ limit: 10 })).commands;
    expect(await trainer.ackCommand({ seq: last!.seq, ok: true })).toEqual({ success: true, first_ack: true });
    const stored = () => runInDurableObject(e.stub, (_i: EngineObject, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM commands").one().n);
    expect(await stored()).toBe(502);
    // The oldest 500 go in the first run, by ack time; the alarm is due again at once.
    await advance(e, ACKED_KEEP_MS + 1_000);
    expect(await stored()).toBe(2);
    expect((await engineStats(e)).alarm_at).toBeLessThanOrEqual(e.clock.t);
    await advance(e, 0);
    expect(await stored()).toBe(0);
    // Acks sent again for any of them, from either run, are repeats.
    for (const seq of [direct[0]!, direct[500]!, last!.seq]) expect(await trainer.ackCommand({ seq, ok: true })).toEqual({ success: true, first_ack: false });
    expect(await engineStats(e)).toMatchObject({ pending_commands: 0, alarm_at: null });
  });

  it("deletes acked commands a while after their ack; an ack of a deleted one is answered as a repeat", async () => {
    const e = await createEngine();
    const client = e.as("client");
    const trainer = e.as("trainer");
    const n = 3;
    await rollingWith(e, n, { zmq: true });
    for (let i = 0; i < n; i++) {
      const c = await client.claimEpisode({ client_uuid: `c${i}`, discard_episode_timeout: 60 });
      const body = endBody(`c${i}`, c.episode_uuid, 1);
      body.workflow_output.log_metrics = { blob: "x".repeat(50_000) };
      expect(await client.endEpisode(body)).toEqual({ success: true });
    }
    const { commands } = await trainer.pollCommands({ limit: 100 });
    expect(commands).toHaveLength(n);
    for (const cmd of commands.slice(0, n - 1)) expect(await trainer.ackCommand({ seq: cmd.seq, ok: true })).toEqual({ success: true, first_ack: true });
    const stored = () => runInDurableObject(e.stub, (_i: EngineObject, state) => state.storage.sql.exec<{ seq: number }>("SELECT seq FROM commands ORDER BY seq").toArray().map((r) => r.seq));
    // Kept a while after the ack: a repeated ack still finds its command.
    await advance(e, 60_000);
    expect(await stored()).toEqual(commands.map((c) => c.seq));
    expect(await trainer.ackCommand({ seq: commands[0]!.seq, ok: true })).toEqual({ success: true, first_ack: false });
    // Then the alarm deletes the acked ones; the unacked one stays and is handed out again.
    await advance(e, 600_000);
    expect(await stored()).toEqual([commands[n - 1]!.seq]);
    expect(await trainer.ackCommand({ seq: commands[0]!.seq, ok: true })).toEqual({ success: true, first_ack: false });
    await expect(trainer.ackCommand({ seq: commands[n - 1]!.seq + 1, ok: true })).rejects.toMatchObject({ status: 404, code: "unknown_command" });
    expect(await trainer.ackCommand({ seq: commands[n - 1]!.seq, ok: true })).toEqual({ success: true, first_ack: true });
    await advance(e, 600_000);
    expect(await stored()).toEqual([]);
    expect(await engineStats(e)).toMatchObject({ pending_commands: 0, alarm_at: null });
  });

  it("expires a clear_sessions command no agent acks within a day (an engine with no agent would keep one per dropped group); other commands wait", async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    // A buffer-only engine: no agent polls. start_rollout queues a command that must wait for one.
    await trainer.startRollout({ num_repeat_per_sample: 2, job_session: "job-1" });
    await e.as("operator").configureBuffer({ ttl_seconds: 60 });
    const stored = () =>
      runInDurableObject(e.stub, (_i: EngineObject, state) =>
        state.storage.sql.exec<{ kind: string }>("SELECT json_extract(body, '$.kind') AS kind FROM commands ORDER BY seq").toArray().map((r) => r.kind),
      );
    // Groups that never fill (one session of two), each dropped at its TTL: a clear_sessions each.
    for (let i = 0; i < 4; i++) {
      await e.as("client").postSteps({ steps: [{ session_id: `s${i}`, group_id: `g${i}`, step_index: 0, messages: [{ role: "user", content: "q" }], response: "a", reward: 1, is_session_completed: true }] });
      await advance(e, 61_000);
    }
    expect(await stored()).toEqual(["start_rollout", "clear_sessions", "clear_sessions", "clear_sessions", "clear_sessions"]);
    // An agent that leases one and goes away before its ack does not keep it either.
    const leased = (await trainer.pollCommands({ limit: 2 })).commands;
    expect(leased.map((c) => c.body.kind)).toEqual(["start_rollout", "clear_sessions"]);
    // A day after the first was queued, the first has gone; the last a little later.
    await advance(e, ADVISORY_KEEP_MS - 3 * 61_000);
    expect(await stored()).toEqual(["start_rollout", "clear_sessions", "clear_sessions", "clear_sessions"]);
    await advance(e, 3 * 61_000);
    expect(await stored()).toEqual(["start_rollout"]);
    expect(await engineStats(e)).toMatchObject({ pending_commands: 1 });
    // The late ack of an expired one is refused as unknown, and changes nothing.
    await expect(trainer.ackCommand({ seq: leased[1]!.seq, ok: true })).rejects.toMatchObject({ status: 404, code: "unknown_command" });
    expect(await trainer.ackCommand({ seq: leased[0]!.seq, ok: true })).toEqual({ success: true, first_ack: true });
  });

  it("expires the clear_sessions commands an engine queued before they expired, a day after each was made (engine migration 18)", async () => {
    const e = await createEngine();
    const left = await runInDurableObject(e.stub, (_i: EngineObject, state) => {
      const sql = state.storage.sql;
      rewindSchema(sql, 18);
      sql.exec("INSERT INTO commands (body, created_at, visible_at) VALUES (?, 1000, 1000), (?, 2000, 2000)", JSON.stringify({ kind: "clear_sessions", session_ids: ["s"], group_ids: ["g"], reason: "incomplete_group_ttl" }), JSON.stringify({ kind: "stop", reason: "r" }));
      migrateEngine(sql);
      return sql.exec<{ kind: string; expires_at: number | null }>("SELECT json_extract(body, '$.kind') AS kind, expires_at FROM commands ORDER BY seq").toArray();
    });
    expect(left).toEqual([
      { kind: "clear_sessions", expires_at: 1000 + ADVISORY_KEEP_MS },
      { kind: "stop", expires_at: null },
    ]);
  });

  it("refuses 404 unknown_command, changing nothing, an ack naming another incarnation: that of the engine deleted before this one was made under its name", async () => {
    // The first engine of the name hands out its seq 1 (a delivery), and is deleted before the ack.
    const first = await createEngine("again");
    await rollingWith(first, 1, { zmq: true });
    const c1 = await first.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    await first.as("client").endEpisode(endBody("c", c1.episode_uuid, 1));
    const old = await first.as("trainer").pollCommands();
    await admin.deleteEngine(first.name, { force: true });

    // Made again under the name: its first delivery has the same seq, under another incarnation.
    const again = await createEngine(undefined, { name: first.name });
    await rollingWith(again, 1, { zmq: true });
    const c2 = await again.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    await again.as("client").endEpisode(endBody("c", c2.episode_uuid, 1));
    const trainer = again.as("trainer");
    const fresh = await trainer.pollCommands();
    expect(fresh.commands.map((c) => c.seq)).toEqual(old.commands.map((c) => c.seq));
    const seq = fresh.commands[0]!.seq;
    const before = await again.as("viewer").overview();
    expect(before).toMatchObject({ pending_commands: 1, deliveries: { pending: 1, delivered: 0, undeliverable: 0 } });

    // The agent's ack owed to the first engine, of either outcome, and one of a seq this engine never had.
    for (const ack of [
      { seq, ok: true, detail: "delivered to the first engine's runner" },
      { seq, ok: false, detail: "the first engine's runner was gone" },
      { seq: seq + 1, ok: true },
    ]) {
      await expect(trainer.ackCommand({ ...ack, incarnation: old.incarnation })).rejects.toMatchObject({ status: 404, code: "unknown_command" });
    }
    expect(await again.as("viewer").overview()).toEqual(before);
    expect([typeof old.incarnation, typeof fresh.incarnation]).toEqual(["string", "string"]);
    expect(fresh.incarnation).not.toBe(old.incarnation);
    // Still this engine's to carry out: handed out again once its lease runs out, and acked under this incarnation.
    await advance(again, 60_000);
    expect((await trainer.pollCommands()).commands).toMatchObject([{ seq, attempt: 2 }]);
    expect(await trainer.ackCommand({ seq, ok: true, incarnation: fresh.incarnation })).toEqual({ success: true, first_ack: true });
    // Once acked, the first engine's ack is still not taken for it (not even as a harmless repeat).
    await expect(trainer.ackCommand({ seq, ok: true, incarnation: old.incarnation })).rejects.toMatchObject({ status: 404, code: "unknown_command" });
    expect(await trainer.ackCommand({ seq, ok: true, incarnation: fresh.incarnation })).toEqual({ success: true, first_ack: false });
    expect((await again.as("viewer").overview()).deliveries).toMatchObject({ pending: 0, delivered: 1, undeliverable: 0 });
  });

  it("refuses an ack for an unknown command and a poll with a bad wait", async () => {
    const e = await createEngine();
    await expect(e.as("trainer").ackCommand({ seq: 999, ok: true })).rejects.toMatchObject({ status: 404, code: "unknown_command" });
    await expect(e.as("trainer").pollCommands({ wait: 60 })).rejects.toMatchObject({ status: 422, detail: expect.stringContaining("wait is at most 25 seconds") });
    await expect(e.as("client").pollCommands()).rejects.toMatchObject({ status: 403 });
  });

  it("refuses a blank wait (`?wait=`, which reads as 0 once coerced) and leases nothing: the poll hands commands out", async () => {
    const e = await createEngine();
    await e.as("operator").syncTrainConfig("ajet:\n  backbone: verl\n");
    await e.as("operator").startEngine();
    for (const wait of ["", "%20"]) {
      const res = await raw(`/e/${e.name}/agent/commands?wait=${wait}`, { token: e.tokens.trainer });
      expect([res.status, res.json?.["error"], String(res.json?.["detail"])]).toEqual([422, "invalid_request", expect.stringMatching(/^wait: /)]);
    }
    expect((await e.as("trainer").pollCommands()).commands.map((c) => c.body.kind)).toEqual(["start"]);
  });

  it("marks a result undeliverable when the agent reports its runner gone", async () => {
    const e = await createEngine();
    await rollingWith(e, 1, { zmq: true });
    const c = await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    await e.as("client").endEpisode(endBody("c", c.episode_uuid, 1));
    const { commands } = await e.as("trainer").pollCommands();
    await e.as("trainer").ackCommand({ seq: commands[0]!.seq, ok: false, detail: "runner at tcp://10.0.0.1:20000 did not ack within 30 s" });
    const row = await runInDurableObject(e.stub, (_i, state) =>
      state.storage.sql.exec<{ delivery: string; delivery_detail: string }>("SELECT delivery, delivery_detail FROM finished").one(),
    );
    expect(row).toEqual({ delivery: "undeliverable", delivery_detail: "runner at tcp://10.0.0.1:20000 did not ack within 30 s" });
  });

  it("answers a registration retried after its episode was claimed and ended as the first, without a second rollout, until the result is undeliverable", async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    const reg = { episode_uuid: "ep-1", openai_base_url: "http://trainer.internal:8000/v1", openai_api_key: "sk-x", zmq_listen_result_addr: "tcp://10.0.0.1:20000" };
    // The first registration's answer is lost; the episode is claimed and ended before the trainer's retry.
    expect((await trainer.registerEpisode(reg)).success).toBe(true);
    const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    expect(await e.as("client").endEpisode(endBody("c1", c.episode_uuid, 1))).toEqual({ success: true });
    const noSecondRollout = async () => {
      expect(await trainer.registerEpisode(reg)).toEqual({ success: true, failure_reason: "" });
      expect(await e.as("client").claimEpisode({ client_uuid: "c2", discard_episode_timeout: 60 })).toMatchObject({ success: false });
      expect(await engineStats(e)).toMatchObject({ registered: 0, claimed: 0 });
    };
    // While the result is on its way to the runner, and once it reached it.
    await noSecondRollout();
    const deliver = (await trainer.pollCommands()).commands.find((x) => x.body.kind === "deliver")!;
    await trainer.ackCommand({ seq: deliver.seq, ok: true });
    await noSecondRollout();
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 2 });
    expect((await e.as("viewer").getRewardHistory()).history.map((h) => [h.global_step, h.count])).toEqual([[1, 1]]);
  });

  it("registers a uuid again once its runner could not be given the result, and after the batch was cleared", async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    const [id] = await rollingWith(e, 1, { zmq: true });
    const reg = { episode_uuid: id!, openai_base_url: "http://trainer.internal:8000/v1", openai_api_key: "sk-y", zmq_listen_result_addr: "tcp://10.0.0.1:20001" };
    const claimAndEnd = async () => {
      const c = await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
      expect(c).toMatchObject({ success: true, episode_uuid: id });
      await e.as("client").endEpisode(endBody("c", id!, 1));
    };
    await claimAndEnd();
    const deliver = (await trainer.pollCommands()).commands.find((x) => x.body.kind === "deliver")!;
    await trainer.ackCommand({ seq: deliver.seq, ok: false, detail: "runner gone" });
    expect(await trainer.registerEpisode(reg)).toEqual({ success: true, failure_reason: "" });
    expect(await engineStats(e)).toMatchObject({ registered: 1 });
    await claimAndEnd();
    // Delivered or not, a new rolling phase forgets the batch's ends.
    await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    expect(await trainer.registerEpisode(reg)).toEqual({ success: true, failure_reason: "" });
    expect(await engineStats(e)).toMatchObject({ registered: 1 });
  });

  it("puts the engine OFFLINE with the reason when the trainer fails to start", async () => {
    const e = await createEngine();
    await e.as("operator").syncTrainConfig("x: 1\n");
    await e.as("operator").startEngine();
    const { commands } = await e.as("trainer").pollCommands();
    await e.as("trainer").ackCommand({ seq: commands[0]!.seq, ok: false, detail: "spawn ajet ENOENT" });
    expect(await e.as("viewer").getEngineStatus()).toMatchObject({ engine_status: "ENGINE.OFFLINE", engine_status_detail: "trainer failed to start: spawn ajet ENOENT" });
  });
});

describe("the agent's refusals", () => {
  it("keeps the latest refusals for the overview, newest first, and leaves undelivered results to their own list", async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    await e.as("operator").syncTrainConfig("x: 1\n");
    for (let i = 0; i < MAX_REFUSALS + 2; i++) {
      await e.as("operator").startEngine();
      const { commands } = await trainer.pollCommands();
      e.clock.t += 1000;
      await trainer.ackCommand({ seq: commands[0]!.seq, ok: false, detail: `spawn ajet ENOENT (${i})` });
    }
    await e.as("operator").stopEngine();
    const stop = (await trainer.pollCommands()).commands[0]!;
    await trainer.ackCommand({ seq: stop.seq, ok: true, detail: "no trainer was running" });
    await rollingWith(e, 1, { zmq: true });
    const c = await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    await e.as("client").endEpisode(endBody("c", c.episode_uuid, 1));
    const deliver = (await trainer.pollCommands()).commands.find((x) => x.body.kind === "deliver")!;
    await trainer.ackCommand({ seq: deliver.seq, ok: false, detail: "runner gone" });

    const o = await e.as("viewer").overview();
    expect(o.refusals).toHaveLength(MAX_REFUSALS);
    expect(o.refusals[0]).toEqual({ seq: expect.any(Number), kind: "start", detail: `spawn ajet ENOENT (${MAX_REFUSALS + 1})`, at: e.clock.t / 1000 });
    expect(o.refusals.map((r) => r.detail).at(-1)).toBe("spawn ajet ENOENT (2)");
    expect(o.refusals.every((r) => r.kind === "start")).toBe(true);
    expect(o.undeliverable).toMatchObject([{ episode_uuid: c.episode_uuid, detail: "runner gone" }]);
  });
});

describe("agent sessions", () => {
  it("lets a restarted agent take over: the old session's open poll gives up and its leases are handed out again", async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    await e.as("operator").syncTrainConfig("x: 1\n");
    await e.as("operator").startEngine();
    const first = await trainer.pollCommands({ session: "agent-old" });
    expect(first.commands.map((c) => c.body.kind)).toEqual(["start"]);
    // The old agent dies mid-poll, its poll still open in the engine.
    const abandoned = trainer.pollCommands({ session: "agent-old", wait: 20 });
    const started = Date.now();
    const takeover = await trainer.pollCommands({ session: "agent-new" });
    // The start it leased is not stuck behind its 60 s lease.
    expect(takeover.commands).toEqual([expect.objectContaining({ seq: first.commands[0]!.seq, attempt: 2 })]);
    expect(await abandoned).toEqual({ incarnation: expect.any(String), commands: [] });
    expect(Date.now() - started).toBeLessThan(10_000);
    await trainer.ackCommand({ seq: takeover.commands[0]!.seq, ok: true });
    await e.as("operator").stopEngine();
    expect((await trainer.pollCommands({ session: "agent-new" })).commands.map((c) => c.body.kind)).toEqual(["stop"]);
  });

  // What a user saw: the agent's poll connection dropped mid-wait (a NAT reset) and the agent
  // polled again at once with its same session; a command queued meanwhile (start_rollout here;
  // a result's `deliver`, `start`, `stop_run` the same) went to the dropped poll, still open in
  // the engine with nobody to read its answer, and the agent got it only once that lease ran out
  // (COMMAND_LEASE_SECONDS, 60 s).
  it("hands a command queued after a poll's client hung up to the same agent's next poll, not to the abandoned one", async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    const waiters = () => runInDurableObject(e.stub, (i: EngineObject) => [...(i as unknown as { channel: { pollWaiters: Set<() => void> } }).channel.pollWaiters]);
    // The Worker does not end a poll whose client went away: it stays open in the engine, as this one does.
    const abandoned = trainer.pollCommands({ session: "agent-1", wait: 20 });
    await vi.waitFor(async () => expect(await waiters()).toHaveLength(1));
    const [dropped] = await waiters();
    // The agent polls again with its session; the command is queued once that poll waits in the engine.
    const live = trainer.pollCommands({ session: "agent-1", wait: 5 });
    await vi.waitFor(async () => expect((await waiters()).filter((w) => w !== dropped)).toHaveLength(1));
    await trainer.startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
    const kinds = (r: Awaited<typeof live>) => r.commands.map((c) => `${c.body.kind} attempt ${c.attempt}`);
    expect({ abandoned: kinds(await abandoned), live: kinds(await live) }).toEqual({ abandoned: [], live: ["start_rollout attempt 1"] });
  });

  it("hands no command to a poll whose token was revoked while it waited, and leases it to the agent with the new token", async () => {
    const e = await createEngine();
    // The operator rotates the agent's token: a new one for the restarted agent, the old one revoked.
    const old = await admin.issueToken(e.name, "trainer", "agent before rotation");
    const poll = raw(`/e/${e.name}/agent/commands?wait=25`, { token: old.token });
    await vi.waitFor(() => runInDurableObject(e.stub, (i) => expect((i as unknown as { channel: { pollWaiters: Set<unknown> } }).channel.pollWaiters.size).toBe(1)));
    await admin.revokeToken(e.name, old.id);
    await e.as("trainer").startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
    // Not leased to the revoked poll (for 60 s, hidden from the agent holding the new token): refused, the command left for the next poll.
    expect(await poll).toMatchObject({ status: 401, json: { error: "invalid_token" } });
    expect((await e.as("trainer").pollCommands()).commands.map((c) => c.body.kind)).toEqual(["start_rollout"]);
  });
});
