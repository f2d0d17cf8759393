import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { hashToken } from "../src/auth/tokens";
import type { EngineObject } from "../src/engine/engine-object";
import { HIDDEN_GATEWAY } from "../src/engine/agent-channel";
import { admin, advance, createEngine, endBody, raw, rollingWith } from "./support/harness";

const heartbeat = (state: "idle" | "running" = "running") => ({
  agent_id: "agent-1",
  host: "gpu-node-7",
  pid: 4321,
  version: "0.1.0",
  trainer: { state, pid: state === "running" ? 999 : null, started_at: null },
});

describe("agent presence", () => {
  it("shows the agent connected while its heartbeats are fresh", async () => {
    const e = await createEngine();
    expect((await e.as("viewer").overview()).agent).toMatchObject({ connected: false, last_seen: null });
    const hb = await e.as("trainer").heartbeat(heartbeat());
    expect(hb).toEqual({ success: true, server_time: e.clock.t / 1000 });
    expect((await e.as("viewer").overview()).agent).toEqual({
      connected: true,
      agent_id: "agent-1",
      host: "gpu-node-7",
      pid: 4321,
      version: "0.1.0",
      trainer_state: "running",
      trainer_pid: 999,
      gateway_url: null,
      rollout_workers: null,
      runs_off_reason: null,
      ledger: null,
      last_seen: e.clock.t / 1000,
    });
    e.clock.t += 44_000;
    expect((await e.as("viewer").overview()).agent.connected).toBe(true);
    e.clock.t += 1_000;
    expect((await e.as("viewer").overview()).agent.connected).toBe(false);
    await expect(e.as("client").heartbeat(heartbeat())).rejects.toMatchObject({ status: 403 });
    const bad = await raw(`/e/${e.name}/agent/heartbeat`, { token: e.tokens.trainer, body: JSON.stringify({ ...heartbeat(), trainer: { state: 3 } }) });
    expect(bad.status).toBe(422);
  });

  it("takes a heartbeat naming a trainer state it does not know (a newer agent's): connected, version and gateway kept, the state shown as given", async () => {
    const e = await createEngine();
    const newer = { ...heartbeat(), version: "0.2.0", gateway_url: "http://gpu-node-7:10087", trainer: { state: "paused", pid: 999, started_at: null } };
    const r = await raw(`/e/${e.name}/agent/heartbeat`, { token: e.tokens.trainer, body: JSON.stringify(newer) });
    const agent = (await e.as("trainer").overview()).agent;
    expect({ status: r.status, connected: agent.connected, version: agent.version, gateway_url: agent.gateway_url, trainer_state: agent.trainer_state }).toEqual({
      status: 200,
      connected: true,
      version: "0.2.0",
      gateway_url: "http://gpu-node-7:10087",
      trainer_state: "paused",
    });
    // Bounded: a value is a word or two, not a text to keep.
    const long = await raw(`/e/${e.name}/agent/heartbeat`, { token: e.tokens.trainer, body: JSON.stringify({ ...newer, trainer: { state: "p".repeat(65) } }) });
    expect({ status: long.status, trainer_state: (await e.as("viewer").overview()).agent.trainer_state }).toEqual({ status: 422, trainer_state: "paused" });
  });

  it("shows the gateway's URL to the trainer and the admin alone: the relay never tells clients where it is, and it may carry a tunnel's password", async () => {
    const e = await createEngine();
    const url = "https://rx-user:tunnel-s3cret@gpu-node-7.example.net:10087";
    expect((await raw(`/e/${e.name}/agent/heartbeat`, { token: e.tokens.trainer, body: JSON.stringify({ ...heartbeat(), gateway_url: url }) })).status).toBe(200);
    for (const role of ["trainer", "admin"] as const) expect((await e.as(role).overview()).agent.gateway_url).toBe(url);
    for (const role of ["operator", "client", "viewer"] as const) {
      const seen = await raw(`/e/${e.name}/overview`, { token: e.tokens[role] });
      expect(seen.status).toBe(200);
      expect(JSON.parse(seen.text)).toMatchObject({ agent: { connected: true, gateway_url: HIDDEN_GATEWAY } });
      for (const part of ["tunnel-s3cret", "gpu-node-7.example.net"]) expect(seen.text).not.toContain(part);
    }
    // Without a gateway, every role reads that there is none.
    await raw(`/e/${e.name}/agent/heartbeat`, { token: e.tokens.trainer, body: JSON.stringify({ ...heartbeat(), gateway_url: null }) });
    expect((await e.as("viewer").overview()).agent.gateway_url).toBeNull();
  });

  it("shows the rollout workers the agent reports: running, then how they ended on their own", async () => {
    const e = await createEngine();
    const running = { state: "running", pid: 77, job_session: "job-1", detail: "running, group size 8" } as const;
    await e.as("trainer").heartbeat({ ...heartbeat(), rollout_workers: running });
    expect((await e.as("viewer").overview()).agent.rollout_workers).toEqual(running);
    const exited = { state: "exited", pid: 77, job_session: "job-1", detail: "rollout workers exited with code 1; see /var/log/rollout-workers.log on the host" } as const;
    await e.as("trainer").heartbeat({ ...heartbeat(), rollout_workers: exited });
    expect((await e.as("viewer").overview()).agent.rollout_workers).toEqual(exited);
    const bad = await raw(`/e/${e.name}/agent/heartbeat`, { token: e.tokens.trainer, body: JSON.stringify({ ...heartbeat(), rollout_workers: { ...exited, state: 1 } }) });
    expect(bad.status).toBe(422);
    expect((await e.as("viewer").overview()).agent.rollout_workers).toEqual(exited);
    // A state a newer agent added is shown as given.
    const paused = { state: "paused", pid: 77, job_session: "job-1", detail: "paused by the operator" };
    await e.as("trainer").heartbeat({ ...heartbeat(), rollout_workers: paused });
    expect((await e.as("viewer").overview()).agent.rollout_workers).toEqual(paused);
  });

  it("shows what the agent's gateway recorded and lost on the way to the ledger, from each heartbeat; a bad count changes nothing", async () => {
    const e = await createEngine();
    const ledger = { queued_calls: 12, queued_bytes: 40_960, oldest_queued_ms: 1_500, sent_calls: 3_402, duplicate_calls: 2, dropped_calls: 5, refused_calls: 0, unrecorded_calls: 1 };
    await e.as("trainer").heartbeat({ ...heartbeat(), ledger });
    expect((await e.as("viewer").overview()).agent.ledger).toEqual(ledger);
    for (const bad of [{ ...ledger, dropped_calls: -1 }, { ...ledger, sent_calls: 1.5 }, { ...ledger, oldest_queued_ms: "1500" }, { sent_calls: 1 }]) {
      const r = await raw(`/e/${e.name}/agent/heartbeat`, { token: e.tokens.trainer, body: JSON.stringify({ ...heartbeat(), ledger: bad }) });
      expect(r.status).toBe(422);
    }
    expect((await e.as("viewer").overview()).agent.ledger).toEqual(ledger);
    // An agent without a gateway, or one older than the report, says nothing of it.
    await e.as("trainer").heartbeat(heartbeat());
    expect((await e.as("viewer").overview()).agent.ledger).toBeNull();
  });

  it("takes the engine OFFLINE with the exit code and last log lines when the trainer dies", async () => {
    const e = await createEngine();
    await rollingWith(e, 2);
    await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    await e.as("trainer").trainerExit({ exit_code: 3, signal: null, log_tail: "Traceback...\nCUDA out of memory" });
    expect(await e.as("viewer").getEngineStatus()).toEqual({
      engine_status: "ENGINE.OFFLINE",
      engine_status_detail: "trainer exited with code 3; last output:\nTraceback...\nCUDA out of memory",
      global_step: 0,
    });
    expect((await e.as("viewer").overview()).episodes).toEqual({ registered: 0, claimed: 0, resetting: 0 });
    await e.as("trainer").trainerExit({ exit_code: null, signal: "SIGKILL" });
    expect((await e.as("viewer").getEngineStatus()).engine_status_detail).toBe("trainer was killed by SIGKILL");
  });
});

describe("a trainer's exit reported again", () => {
  it("leaves the engine of a trainer started since alone: the report names the start that launched the trainer that exited", async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    await e.as("operator").syncTrainConfig("a: 1");
    const startOf = async () => {
      await e.as("operator").startEngine();
      const start = (await trainer.pollCommands()).commands.find((c) => c.body.kind === "start")!;
      await trainer.ackCommand({ seq: start.seq, ok: true });
      return start.seq;
    };
    const first = await startOf();
    await rollingWith(e, 1);
    const exit = { exit_code: 1, signal: null, log_tail: "Traceback ...", start_seq: first };
    // The first report's answer is lost: the agent retries it with backoff, while the operator starts a new trainer.
    await trainer.trainerExit(exit);
    expect((await e.as("viewer").getEngineStatus()).engine_status).toBe("ENGINE.OFFLINE");
    const second = await startOf();
    expect(second).toBeGreaterThan(first);
    await rollingWith(e, 2, { prefix: "new" });
    const c = await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    const before = await e.as("viewer").overview();
    expect(await trainer.trainerExit(exit)).toEqual({ success: true });
    expect(await e.as("viewer").overview()).toEqual(before);
    expect(await e.as("client").canContinueEpisode({ client_uuid: "c", episode_uuid: c.episode_uuid })).toEqual({ can_continue: true });
    // The new trainer's own exit, and one from an agent that names no start (older agents), still count.
    await trainer.trainerExit({ ...exit, start_seq: second });
    expect((await e.as("viewer").getEngineStatus()).engine_status).toBe("ENGINE.OFFLINE");
    await startOf();
    await trainer.trainerExit({ exit_code: 2, signal: null });
    expect(await e.as("viewer").getEngineStatus()).toMatchObject({ engine_status: "ENGINE.OFFLINE", engine_status_detail: "trainer exited with code 2" });
    await expect(trainer.trainerExit({ ...exit, start_seq: -1 })).rejects.toMatchObject({ status: 422 });
  });

  it("leaves an engine made again under the name alone when the report names the deleted engine's start, though its seq is the same", async () => {
    const first = await createEngine("again");
    await first.as("operator").syncTrainConfig("a: 1");
    await first.as("operator").startEngine();
    const old = await first.as("trainer").pollCommands();
    const seq = old.commands.find((c) => c.body.kind === "start")!.seq;
    await admin.deleteEngine(first.name, { force: true });

    // Made again under the name: its start has the same seq, under another incarnation.
    const again = await createEngine(undefined, { name: first.name });
    await again.as("operator").syncTrainConfig("a: 1");
    await again.as("operator").startEngine();
    const trainer = again.as("trainer");
    const fresh = await trainer.pollCommands();
    expect(fresh.commands.find((c) => c.body.kind === "start")!.seq).toBe(seq);
    expect(fresh.incarnation).not.toBe(old.incarnation);
    await rollingWith(again, 1);
    const before = await again.as("viewer").overview();
    // The deleted engine's trainer exits: the agent reports it, naming that engine's start.
    const exit = { exit_code: 1, signal: null, start_seq: seq };
    expect(await trainer.trainerExit({ ...exit, start_incarnation: old.incarnation! })).toEqual({ success: true });
    expect(await again.as("viewer").overview()).toEqual(before);
    // This engine's own trainer's exit counts.
    await trainer.trainerExit({ ...exit, start_incarnation: fresh.incarnation! });
    expect((await again.as("viewer").getEngineStatus()).engine_status).toBe("ENGINE.OFFLINE");
    await expect(trainer.trainerExit({ ...exit, start_incarnation: "x".repeat(65) })).rejects.toMatchObject({ status: 422 });
  });
});

describe("the agent's gateway secret", () => {
  it("says an engine without CLAIM_KEY_SECRET lacks the secret, as a claim does", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    await runInDurableObject(e.stub, (instance: EngineObject) => {
      const self = instance as unknown as { env: Record<string, unknown> };
      self.env = { ...self.env, CLAIM_KEY_SECRET: undefined };
    });
    // The agent's gateway asks for its secret at start; its operator reads this answer in the agent's log.
    const secret = await raw(`/e/${e.name}/agent/gateway_secret`, { token: e.tokens.trainer });
    expect(secret).toMatchObject({ status: 500, json: { error: "misconfigured", detail: expect.stringMatching(/^CLAIM_KEY_SECRET is not configured/) } });
    const claimed = await raw(`/e/${e.name}/claim_episode`, { token: e.tokens.client, body: JSON.stringify({ client_uuid: "c1", discard_episode_timeout: 60 }) });
    expect(claimed).toEqual(secret);
  });
});

describe("batched trainer calls", () => {
  it("answer each item exactly as the single call would, in order", async () => {
    const e = await createEngine();
    await rollingWith(e, 3);
    const trainer = e.as("trainer");
    const c = await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    const singles = [
      await trainer.isEpisodeClaimed({ episode_uuid: c.episode_uuid }),
      await trainer.isEpisodeClaimed({ episode_uuid: "ep-1" }),
      await trainer.isEpisodeClaimed({ episode_uuid: "ghost" }),
    ];
    const batch = await trainer.batchIsEpisodeClaimed({
      checks: [{ episode_uuid: c.episode_uuid }, { episode_uuid: "ep-1" }, { episode_uuid: "ghost" }, { episode_uuid: "ep-2", unregister_if_not_claimed: true }],
    });
    expect(batch.results.slice(0, 3)).toEqual(singles);
    expect(batch.results[3]).toEqual({ success: false, failure_reason: "" });
    expect((await trainer.getEpisodeBuffer()).buffer.map((b) => b.episode_uuid)).toEqual([c.episode_uuid, "ep-1"]);
  });

  it("registers many episodes in one request, idempotently, and refuses outside ROLLING", async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    const episodes = Array.from({ length: 50 }, (_, i) => ({ episode_uuid: `b-${i}`, zmq_listen_result_addr: `ipc:///tmp/b-${i}` }));
    const off = await trainer.batchRegisterEpisodes({ episodes: episodes.slice(0, 2) });
    expect(off.results.every((r) => !r.success && r.failure_reason.includes("not in rolling state"))).toBe(true);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING" });
    const first = await trainer.batchRegisterEpisodes({ episodes });
    expect(first.results).toHaveLength(50);
    expect(first.results.every((r) => r.success)).toBe(true);
    await trainer.batchRegisterEpisodes({ episodes: episodes.slice(0, 10) });
    const buf = await trainer.getEpisodeBuffer();
    expect(buf.buffer.map((b) => b.episode_uuid)).toEqual(episodes.map((x) => x.episode_uuid));
  });

  it("refuses empty and oversized batches without changing anything", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const empty = await raw(`/e/${e.name}/batch/register_episode`, { token: e.tokens.trainer, body: JSON.stringify({ episodes: [] }) });
    expect(empty.status).toBe(422);
    const big = Array.from({ length: 1001 }, (_, i) => ({ episode_uuid: `x${i}` }));
    const tooMany = await raw(`/e/${e.name}/batch/register_episode`, { token: e.tokens.trainer, body: JSON.stringify({ episodes: big }) });
    expect(tooMany.status).toBe(422);
    const halfBad = await raw(`/e/${e.name}/batch/register_episode`, {
      token: e.tokens.trainer,
      body: JSON.stringify({ episodes: [{ episode_uuid: "fine" }, { episode_uuid: 7 }] }),
    });
    expect(halfBad).toMatchObject({ status: 422, json: { detail: expect.stringContaining("episodes.1.episode_uuid") } });
    expect((await e.as("viewer").overview()).episodes.registered).toBe(1);
  });
});

describe("overview", () => {
  it("counts episodes and deliveries and lists undeliverable results", async () => {
    const e = await createEngine();
    await rollingWith(e, 5, { zmq: true });
    const client = e.as("client");
    const trainer = e.as("trainer");
    const a = await client.claimEpisode({ client_uuid: "a", discard_episode_timeout: 60 });
    const b = await client.claimEpisode({ client_uuid: "b", discard_episode_timeout: 60 });
    await client.claimEpisode({ client_uuid: "c", discard_episode_timeout: 10 });
    await client.endEpisode(endBody("a", a.episode_uuid, 1));
    await client.endEpisode(endBody("b", b.episode_uuid, 0));
    await advance(e, 10_000);
    const { commands } = await trainer.pollCommands();
    const deliverA = commands.find((c) => c.body.kind === "deliver" && c.body.episode_uuid === a.episode_uuid)!;
    const deliverB = commands.find((c) => c.body.kind === "deliver" && c.body.episode_uuid === b.episode_uuid)!;
    await trainer.ackCommand({ seq: deliverA.seq, ok: true });
    await trainer.ackCommand({ seq: deliverB.seq, ok: false, detail: "runner gone: no ack in 30 s" });
    const o = await e.as("viewer").overview();
    expect(o).toMatchObject({
      engine: e.name,
      engine_status: "ENGINE.ROLLING",
      episodes: { registered: 2, claimed: 0, resetting: 1 },
      deliveries: { pending: 0, delivered: 1, undeliverable: 1 },
      undeliverable: [{ episode_uuid: b.episode_uuid, fence: 1, detail: "runner gone: no ack in 30 s", ended_at: expect.any(Number) }],
      pending_commands: 1,
    });
  });

  it("counts and lists a result the agent could not deliver after the trainer left ROLLING, with the agent's words", async () => {
    // AgentJet's trainer leaves ROLLING as its batch's last end is stored, before the agent hands
    // the result over: the end moved out of the batch, was counted pending, and its failed
    // delivery then left every count (deliveries, the list, rx_deliveries).
    const e = await createEngine();
    await rollingWith(e, 1, { zmq: true });
    const trainer = e.as("trainer");
    const a = await e.as("client").claimEpisode({ client_uuid: "a", discard_episode_timeout: 60 });
    await e.as("client").endEpisode(endBody("a", a.episode_uuid, 1));
    await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    expect((await e.as("viewer").overview()).deliveries).toEqual({ pending: 1, delivered: 0, undeliverable: 0 });
    const { commands } = await trainer.pollCommands();
    const deliver = commands.find((c) => c.body.kind === "deliver")!;
    await trainer.ackCommand({ seq: deliver.seq, ok: false, detail: "runner gone: no ack in 30 s" });
    expect(await e.as("viewer").overview()).toMatchObject({
      deliveries: { pending: 0, delivered: 0, undeliverable: 1 },
      undeliverable: [{ episode_uuid: a.episode_uuid, fence: 1, detail: "runner gone: no ack in 30 s", ended_at: expect.any(Number) }],
    });
    const metrics = await (await raw(`/e/${e.name}/metrics`, { token: e.tokens.viewer, method: "GET" })).text;
    expect(metrics).toContain('rx_deliveries{engine="' + e.name + '",state="undeliverable"} 1');
  });

  it("says since when the engine has been BOOTING: a start the agent never took shows an hour-long boot", async () => {
    const e = await createEngine();
    const op = e.as("operator");
    await op.syncTrainConfig("a: 1");
    const t0 = e.clock.t;
    await op.startEngine();
    await advance(e, 3_600_000);
    expect(await e.as("viewer").overview()).toMatchObject({
      engine_status: "ENGINE.BOOTING",
      engine_status_since: t0,
      pending_commands: 1,
      agent: { connected: false, last_seen: null },
    });
    // The trainer's own BOOTING report (it booted at last) does not move the start of the boot.
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.BOOTING" });
    expect((await e.as("viewer").overview()).engine_status_since).toBe(t0);
    await op.stopEngine();
    expect(await e.as("viewer").overview()).toMatchObject({ engine_status: "ENGINE.OFFLINE", engine_status_since: e.clock.t });
  });
});

describe("running episodes", () => {
  it("pages through claimed episodes soonest-to-expire first, never repeating one", async () => {
    const e = await createEngine();
    await rollingWith(e, 12);
    const client = e.as("client");
    for (let i = 0; i < 10; i++) {
      await client.claimEpisode({ client_uuid: `c${i}`, discard_episode_timeout: 100 - i });
    }
    e.clock.t += 2_000;
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const page = await e.as("viewer").runningEpisodes({ limit: 4, ...(cursor ? { cursor } : {}) });
      expect(page.total).toBe(10);
      expect(page.episodes.length).toBeLessThanOrEqual(4);
      seen.push(...page.episodes.map((x) => x.client_uuid));
      cursor = page.next_cursor ?? undefined;
      pages++;
    } while (cursor);
    expect(pages).toBe(3);
    expect(seen).toEqual(["c9", "c8", "c7", "c6", "c5", "c4", "c3", "c2", "c1", "c0"]);
    const first = (await e.as("viewer").runningEpisodes({ limit: 1 })).episodes[0];
    expect(first).toEqual({
      episode_uuid: "ep-9",
      client_uuid: "c9",
      episode_type: "train",
      task_id: "",
      idle_seconds: 2,
      discard_episode_timeout: 91,
      expires_in: 89,
      llm_call_count: 0,
      fence: 1,
    });
  });

  it("pages through episodes and clients whose names are not Latin-1", async () => {
    const e = await createEngine();
    await rollingWith(e, 0);
    const names = ["ep-😀", "ep-\u202eevil", "ep-e\u0301", "ep-plain"];
    for (const id of names) await e.as("trainer").registerEpisode({ episode_uuid: id });
    for (const [i, id] of names.entries()) await e.as("client").claimEpisode({ client_uuid: `c-${id}`, discard_episode_timeout: 10 + i });
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const res = await raw(`/e/${e.name}/running_episodes?limit=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`, { token: e.tokens.viewer });
      expect(res.status, res.text).toBe(200);
      const page = res.json as { episodes: { episode_uuid: string }[]; next_cursor: string | null };
      seen.push(...page.episodes.map((x) => x.episode_uuid));
      cursor = page.next_cursor ?? undefined;
    } while (cursor && seen.length <= names.length);
    expect(seen).toEqual(names);
  });

  it("refuses a forged cursor and a bad limit", async () => {
    const e = await createEngine();
    const forged = await raw(`/e/${e.name}/running_episodes?cursor=bm90LWpzb24`, { token: e.tokens.viewer });
    expect(forged).toMatchObject({ status: 422, json: { detail: expect.stringContaining("cursor") } });
    const bad = await raw(`/e/${e.name}/running_episodes?limit=0`, { token: e.tokens.viewer });
    expect(bad.status).toBe(422);
  });
});

describe("hooks for Worker-side features", () => {
  it("authorizes an operation without doing it, and queues a command for a caller allowed to", async () => {
    const e = await createEngine();
    const as = async (role: "viewer" | "operator") => ({ admin: false as const, tokenHash: await hashToken(e.tokens[role]) });
    // The incarnation names where the engine's ledger bodies live (src/ledger/keys.ts).
    expect(await e.stub.authorizeOp(await as("viewer"), "get_overview")).toEqual({ ok: true, body: { role: "viewer", engine: e.name, incarnation: expect.stringMatching(/^.{8,}$/) } });
    expect(await e.stub.authorizeOp(await as("viewer"), "start_engine")).toMatchObject({ ok: false, status: 403 });
    expect(await e.stub.authorizeOp({ admin: false, tokenHash: "0".repeat(64) }, "get_overview")).toMatchObject({ ok: false, status: 401 });
    const queued = await e.stub.enqueueFor(await as("operator"), "start_engine", { kind: "stop", reason: "test" });
    expect(queued.ok).toBe(true);
    expect((await e.as("trainer").pollCommands()).commands.map((c) => c.body)).toEqual([{ kind: "stop", reason: "test" }]);
    expect(await e.stub.enqueueFor(await as("viewer"), "start_engine", { kind: "stop", reason: "x" })).toMatchObject({ ok: false, status: 403 });
  });
});
