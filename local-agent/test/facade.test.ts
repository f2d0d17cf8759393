/**
 * The trainer facade against the real Worker (through a counting proxy): it must answer
 * exactly what the engine answers, and coalesce the trainer's chatty calls.
 */
import { randomUUID } from "node:crypto";
import { Agent, get, request } from "node:http";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, onTestFinished } from "vitest";
import { EngineLink } from "../src/engine-link";
import { Facade, type FacadeOptions } from "../src/facade";
import { startTestExchange, type TestEngine, type TestExchange } from "./support/exchange";
import { MemoryLogger } from "./support/logger";
import { manualSchedule } from "./support/manual-schedule";
import type { Schedule } from "../src/coalescer";
import { FaultyProxy } from "./support/proxy";
import { waitUntil } from "./support/wait";

let ex: TestExchange;
let proxy: FaultyProxy;
let engine: TestEngine;
let logger: MemoryLogger;
const facades: Facade[] = [];

beforeAll(async () => {
  ex = await startTestExchange();
});
afterAll(async () => {
  await ex?.stop();
});
beforeEach(async () => {
  proxy = new FaultyProxy(ex.url);
  await proxy.listen();
  engine = await ex.newEngine();
  logger = new MemoryLogger();
});
afterEach(async () => {
  for (const f of facades.splice(0)) await f.close();
  await proxy.close();
});

async function facade(coalesceMs = 30, forEngine = engine, schedule?: Schedule, over: Partial<FacadeOptions> = {}): Promise<Facade> {
  const f = new Facade({ link: new EngineLink(proxy.url, forEngine.name, forEngine.tokens.trainer, 5000), host: "127.0.0.1", port: 0, coalesceMs, logger, ...(schedule ? { schedule } : {}), ...over });
  await f.listen();
  facades.push(f);
  return f;
}

type Answer = { status: number; body: unknown };

async function call(base: string, method: "GET" | "POST", path: string, body?: unknown, token?: string): Promise<Answer> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (token) headers["authorization"] = `Bearer ${token}`;
  const res = await fetch(base + path, { method, headers, body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: JSON.parse(text) as unknown };
}

const post = (base: string, path: string, body: unknown): Promise<Answer> => call(base, "POST", path, body);

/** A GET's status over `agent`'s connections, its body read. */
function getOver(agent: Agent, url: string): Promise<number> {
  return new Promise((resolve, reject) => {
    get(url, { agent }, (res) => {
      res.resume();
      res.once("end", () => resolve(res.statusCode ?? 0));
    }).once("error", reject);
  });
}

describe("the trainer facade", () => {
  it("answers every trainer endpoint exactly as the engine does, errors included", async () => {
    // The same sequence against two fresh engines: one directly, one through the facade.
    const direct = await ex.newEngine();
    const f = await facade(30, engine);
    const steps: Array<["GET" | "POST", string, unknown?]> = [
      ["GET", "/get_engine_status"],
      ["POST", "/register_episode", { episode_uuid: "a" }],
      ["POST", "/update_engine_status", { engine_status: "ENGINE.BOGUS" }],
      ["POST", "/update_engine_status", "{not json"],
      ["POST", "/update_engine_status", { engine_status: "ENGINE.ROLLING", global_step: 3, engine_status_detail: "rolling" }],
      ["POST", "/register_episode", { episode_uuid: "a", openai_base_url: "http://h/v1", openai_api_key: "sk-ajet-x", zmq_listen_result_addr: "tcp://127.0.0.1:1" }],
      ["POST", "/register_episode", { episode_uuid: "a" }],
      ["POST", "/register_episode", { episode_uuid: "" }],
      ["POST", "/register_episode", {}],
      ["POST", "/is_episode_claimed", { episode_uuid: "a" }],
      ["POST", "/is_episode_claimed", { client_uuid: "", episode_uuid: "nope" }],
      ["POST", "/is_episode_claimed", { episode_uuid: 5 }],
      ["POST", "/update_current_batch_rollout_pool_information", { completed_episodes: 3, completed_episode_target: 8, task_expected_num_repeat: 2 }],
      ["POST", "/update_current_batch_rollout_pool_information", { completed_episodes: "three" }],
      ["GET", "/get_current_batch_rollout_pool_information"],
      ["POST", "/is_episode_claimed", { episode_uuid: "a", unregister_if_not_claimed: true }],
      ["POST", "/is_episode_claimed", { episode_uuid: "a" }],
      ["GET", "/get_engine_status"],
    ];
    for (const [method, path, body] of steps) {
      // Engine names differ between the two engines and may appear in error details.
      const want = JSON.parse(JSON.stringify(await call(direct.baseUrl, method, path, body, direct.tokens.trainer)).replaceAll(direct.name, "<engine>")) as Answer;
      const got = JSON.parse(JSON.stringify(await call(f.url, method, path, body)).replaceAll(engine.name, "<engine>")) as Answer;
      expect({ step: `${method} ${path} ${JSON.stringify(body)}`, ...got }).toEqual({ step: `${method} ${path} ${JSON.stringify(body)}`, ...want });
    }
  });

  it("serves the trainer's endpoints only: the agent's own channel is not reachable through it", async () => {
    const f = await facade();
    for (const [method, path] of [["GET", "/agent/commands"], ["POST", "/agent/ack"], ["POST", "/claim_episode"], ["GET", "/nope"]] as const) {
      const r = await call(f.url, method, path, method === "POST" ? {} : undefined);
      expect(r.status).toBe(404);
      expect(r.body).toEqual({ error: "not_found", detail: expect.stringMatching(new RegExp(`^No route ${method} ${path} on the local agent's facade; it serves /register_episode, `)) });
    }
    expect(proxy.total).toBe(0);
  });

  it("coalesces concurrent is_episode_claimed and register_episode calls without changing any answer", async () => {
    const f = await facade(30);
    await post(f.url, "/update_engine_status", { engine_status: "ENGINE.ROLLING" });
    // 64 registrations at once, as a burst from the trainer's runner threads.
    const regs = await Promise.all(Array.from({ length: 64 }, (_, i) => post(f.url, "/register_episode", { episode_uuid: `ep-${i}`, zmq_listen_result_addr: `tcp://127.0.0.1:${20000 + i}` })));
    expect(regs.every((r) => r.status === 200 && JSON.stringify(r.body) === '{"success":true,"failure_reason":""}')).toBe(true);
    // Batched (a window that caught a single call sends it to the plain endpoint).
    expect(proxy.count("/register_episode")).toBeLessThanOrEqual(8);

    // Claim the first 16 (FIFO) through the public API.
    for (let i = 0; i < 16; i++) {
      expect((await engine.client.claimEpisode({ client_uuid: `c${i}`, episode_type: "train", discard_episode_timeout: 60 })).episode_uuid).toBe(`ep-${i}`);
    }
    // 128 runner threads ask at once; the last 16 also ask to unregister if unclaimed.
    const before = proxy.total;
    const checks = await Promise.all(
      Array.from({ length: 128 }, (_, i) => {
        const ep = `ep-${i % 64}`;
        return post(f.url, "/is_episode_claimed", { episode_uuid: ep, unregister_if_not_claimed: i >= 112 });
      }),
    );
    checks.forEach((r, i) => {
      expect(r.status).toBe(200);
      expect(r.body).toEqual({ success: i % 64 < 16, failure_reason: "" });
    });
    // Arrivals spread over the clients' connection setup; still a small fraction of 128.
    expect(proxy.total - before).toBeLessThanOrEqual(8);
    // The unregister requests took effect (episodes 48-63 are gone), exactly as if sent alone.
    const buffer = await engine.operator.getEpisodeBuffer();
    expect(buffer.buffer.map((e) => e.episode_uuid).sort()).toEqual(Array.from({ length: 48 }, (_, i) => `ep-${i}`).sort());
    expect(f.counters.trainerCalls).toBe(1 + 64 + 128);
  });

  it("splits a window's registrations into batches the Worker's body limit takes, each answered as if alone", async () => {
    const window = manualSchedule();
    const f = await facade(30, engine, window.schedule);
    await post(f.url, "/update_engine_status", { engine_status: "ENGINE.ROLLING" });
    // Each within the engine's limits (a key of up to 8,192 characters); 600 of them are over 4 MiB of JSON.
    const reg = (i: number) => ({ episode_uuid: `big-${i}`, openai_base_url: "http://127.0.0.1:1/v1", openai_api_key: "sk-ajet-" + "A".repeat(8000), zmq_listen_result_addr: `ipc:///tmp/rx-big-${i}.sock` });
    const pending = Promise.all(Array.from({ length: 600 }, (_, i) => post(f.url, "/register_episode", reg(i))));
    await waitUntil(() => f.counters.trainerCalls === 601, "every registration to reach the facade");
    window.fire();
    const answers = await pending;
    expect(answers.filter((a) => a.status !== 200 || JSON.stringify(a.body) !== '{"success":true,"failure_reason":""}')).toEqual([]);
    // One window, in two requests of at most 3 MiB each.
    expect(proxy.count("/batch/register_episode")).toBe(2);
    expect((await engine.operator.getEpisodeBuffer()).buffer).toHaveLength(600);
  });

  it("shares one request among identical concurrent status reads, and never answers a read with state older than the read", async () => {
    // The window closes by hand once all 50 reads are in, so the count does not depend on how
    // quickly a loaded machine delivers them.
    const window = manualSchedule();
    const f = await facade(30, engine, window.schedule);
    const before = proxy.count("/get_engine_status");
    const pending = Promise.all(Array.from({ length: 50 }, () => call(f.url, "GET", "/get_engine_status")));
    while (f.counters.trainerCalls < 50) await new Promise((r) => setTimeout(r, 5));
    expect(proxy.count("/get_engine_status") - before).toBe(0);
    window.fire();
    const reads = await pending;
    expect(new Set(reads.map((r) => JSON.stringify(r))).size).toBe(1);
    expect(proxy.count("/get_engine_status") - before).toBe(1);

    // Read-your-writes while other readers keep a shared read in flight all the time.
    const g = await facade(30);
    let hammering = true;
    const hammer = (async () => {
      while (hammering) await call(g.url, "GET", "/get_engine_status");
    })();
    for (let step = 1; step <= 15; step++) {
      await post(g.url, "/update_engine_status", { engine_status: "ENGINE.ROLLING", global_step: step });
      const s = await call(g.url, "GET", "/get_engine_status");
      expect((s.body as { global_step: number }).global_step).toBe(step);
    }
    hammering = false;
    await hammer;
  });

  it("forwards every call on its own when coalescing is off", async () => {
    const f = await facade(0);
    await Promise.all(Array.from({ length: 10 }, () => post(f.url, "/is_episode_claimed", { episode_uuid: "x" })));
    expect(proxy.count("/is_episode_claimed")).toBe(10);
    expect(proxy.count("/batch/is_episode_claimed")).toBe(0);
  });

  it("falls back to single calls against an exchange without batch endpoints", async () => {
    const f = await facade(30);
    await post(f.url, "/update_engine_status", { engine_status: "ENGINE.ROLLING" });
    // An older exchange: its router does not know the batch paths.
    proxy.fault = (p) => (p.includes("/batch/") ? "no-route" : "pass");
    const answers = await Promise.all(Array.from({ length: 5 }, (_, i) => post(f.url, "/register_episode", { episode_uuid: `old-${i}` })));
    expect(answers.map((a) => a.body)).toEqual(Array.from({ length: 5 }, () => ({ success: true, failure_reason: "" })));
    expect(proxy.count("/register_episode")).toBe(5);
    expect(logger.has(/has no \/batch\/register_episode endpoint; the facade forwards the trainer's calls one by one/)).toBe(true);
  });

  it("answers 502 in plain words when the exchange cannot be reached, and 413 for oversized bodies", async () => {
    const f = await facade(30);
    proxy.fault = () => "refuse";
    for (const [method, path, body] of [
      ["POST", "/is_episode_claimed", { episode_uuid: "a" }],
      ["POST", "/register_episode", { episode_uuid: "a" }],
      ["GET", "/get_engine_status", undefined],
      ["POST", "/update_engine_status", { engine_status: "ENGINE.ROLLING" }],
    ] as const) {
      const r = await call(f.url, method, path, body);
      expect(r.status).toBe(502);
      expect(r.body).toEqual({ error: "exchange_unreachable", detail: expect.stringMatching(/^The local agent cannot reach the exchange at http:\/\/127\.0\.0\.1:\d+\/e\/e-/) });
    }
    proxy.fault = () => "pass";
    const big = await post(f.url, "/update_current_batch_rollout_pool_information", { sample_collection_method: "x".repeat(5 * 1024 * 1024) });
    expect(big).toEqual({ status: 413, body: { error: "payload_too_large", detail: "The request body exceeds 4194304 bytes." } });
  });
});

describe("the trainer facade as the agent stops", () => {
  it("answers the calls it holds, queued in a window or on their way to the engine, before it closes", async () => {
    // The agent stops (an upgrade, a restart) while the trainer's runner threads call it: a
    // registration waiting in the coalescing window, a check, a status read, and a call the
    // engine has not answered yet. Each was sent on: the trainer must hear the engine's answer,
    // not a dropped connection it retries against a facade that is gone.
    const window = manualSchedule();
    const f = await facade(30, engine, window.schedule);
    await post(f.url, "/update_engine_status", { engine_status: "ENGINE.ROLLING" });
    let release = (): void => undefined;
    const held = new Promise<void>((r) => (release = r));
    proxy.hold = (path, phase) => (path.endsWith("/get_reward_history") && phase === "answer" ? held : undefined);
    const pending = Promise.all([
      post(f.url, "/register_episode", { episode_uuid: "at-stop-1" }),
      post(f.url, "/register_episode", { episode_uuid: "at-stop-2" }),
      post(f.url, "/is_episode_claimed", { episode_uuid: "at-stop-1" }),
      call(f.url, "GET", "/get_engine_status"),
      call(f.url, "GET", "/get_reward_history"),
    ]);
    await waitUntil(() => f.counters.trainerCalls === 6 && proxy.count("/get_reward_history") === 1, "every call to reach the facade");
    const closed = f.close();
    setTimeout(release, 50);
    const answers = await pending;
    await closed;
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200]);
    expect(answers.slice(0, 2).map((a) => a.body)).toEqual([{ success: true, failure_reason: "" }, { success: true, failure_reason: "" }]);
    expect(answers[2]!.body).toMatchObject({ success: false });
    expect(answers[3]!.body).toMatchObject({ engine_status: "ENGINE.ROLLING" });
    expect((await engine.operator.getEpisodeBuffer()).buffer.map((e) => e.episode_uuid).sort()).toEqual(["at-stop-1", "at-stop-2"]);
    // Closed: no new connection is served.
    await expect(fetch(f.url + "/get_engine_status")).rejects.toThrow();
  });

  it("closes within its grace even when the engine never answers a call it holds", async () => {
    const f = await facade(30);
    proxy.hold = (path, phase) => (path.endsWith("/get_reward_history") && phase === "answer" ? new Promise<void>(() => undefined) : undefined);
    const pending = call(f.url, "GET", "/get_reward_history").then(
      () => "answered",
      () => "connection closed",
    );
    await waitUntil(() => proxy.count("/get_reward_history") === 1, "the call to reach the engine");
    await f.close(100);
    expect(await pending).toBe("connection closed");
  });
});

describe("the trainer facade on a shared host", () => {
  const me = process.getuid!();

  it("serves the agent's own user's processes, told apart by /proc/net (a real connection as this test's uid)", async () => {
    const f = await facade(30);
    expect(await post(f.url, "/update_engine_status", { engine_status: "ENGINE.ROLLING" })).toEqual({ status: 200, body: { success: true, failure_reason: "" } });
    expect(logger.has(/refused|cannot tell/)).toBe(false);
  });

  it("does not hand the trainer's per-episode keys to another user's process, nor let it change the engine's status", async () => {
    const trainer = await facade(30);
    await post(trainer.url, "/update_engine_status", { engine_status: "ENGINE.ROLLING" });
    const key = `sk-trainer-episode-key-${randomUUID()}`;
    const registered = await post(trainer.url, "/register_episode", { episode_uuid: randomUUID(), openai_base_url: "http://127.0.0.1:1/v1", openai_api_key: key, zmq_listen_result_addr: "ipc:///tmp/x.sock" });
    expect(registered).toEqual({ status: 200, body: { success: true, failure_reason: "" } });

    // The same loopback port seen from another user's process: no token, no header (the trainer sends none either).
    let lookups = 0;
    const other = await facade(30, engine, undefined, {
      peerUid: async () => {
        lookups++;
        return me + 1;
      },
    });
    const before = proxy.total;
    const buffer = await fetch(`${other.url}/get_episode_buffer`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    const text = await buffer.text();
    expect(text).not.toContain(key);
    expect(buffer.status).toBe(403);
    expect(JSON.parse(text)).toEqual({ error: "forbidden_peer", detail: expect.stringContaining(`serves only processes of the agent's own user (uid ${me}), as it hands out the trainer's per-episode keys; this connection is from uid ${me + 1}`) });
    expect(await post(other.url, "/update_engine_status", { engine_status: "ENGINE.OFFLINE" })).toMatchObject({ status: 403 });
    // Looked up once a connection, which keep-alive reuses.
    const oneConnection = new Agent({ keepAlive: true, maxSockets: 1 });
    onTestFinished(() => oneConnection.destroy());
    const seen = lookups;
    for (const path of ["/_agent/status", "/get_engine_status", "/get_current_batch_rollout_pool_information"]) expect(await getOver(oneConnection, other.url + path)).toBe(403);
    expect(lookups).toBe(seen + 1);
    expect(proxy.total).toBe(before);
    expect((await call(trainer.url, "GET", "/get_engine_status")).body).toMatchObject({ engine_status: "ENGINE.ROLLING" });
    expect(logger.lines.filter((l) => l.includes(`refused a connection from a process of uid ${me + 1}`))).toHaveLength(1);
  });

  it("refuses a connection /proc/net does not list (another host or network namespace)", async () => {
    const f = await facade(30, engine, undefined, { peerUid: async () => null });
    const r = await call(f.url, "GET", "/get_engine_status");
    expect(r).toEqual({ status: 403, body: { error: "forbidden_peer", detail: expect.stringContaining("this connection is not one of this host's own (another host or network namespace?)") } });
  });

  it("warns at start, and serves everyone, where it cannot tell users apart", async () => {
    const f = await facade(30, engine, undefined, { peerUid: null });
    expect((await call(f.url, "GET", "/get_engine_status")).status).toBe(200);
    expect(logger.lines.filter((l) => l.includes("the trainer facade cannot tell this host's users apart"))).toHaveLength(1);
  });

  it("serves every peer when the operator says so (a trainer in a container), and says that at start", async () => {
    const f = await facade(30, engine, undefined, { peerUid: null, anyPeer: true });
    expect((await call(f.url, "GET", "/get_engine_status")).status).toBe(200);
    expect(logger.lines.filter((l) => l.includes("the trainer facade serves every process that reaches it (facadeAnyPeer)"))).toHaveLength(1);
    expect(logger.lines.filter((l) => l.includes("cannot tell this host's users apart"))).toEqual([]);
  });
});

/** A raw HTTP request (node:http, which, unlike fetch, sends a GET with a body as Python's requests does). */
function rawRequest(url: string, method: string, body: string | undefined, token?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (body !== undefined) headers["content-length"] = String(Buffer.byteLength(body));
    if (token !== undefined) headers["authorization"] = `Bearer ${token}`;
    const req = request(url, { method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        let parsed: unknown = text;
        try {
          parsed = JSON.parse(text);
        } catch {
          /* not JSON */
        }
        resolve({ status: res.statusCode ?? 0, body: parsed });
      });
    });
    req.on("error", reject);
    req.end(body);
  });
}

describe("the facade answers what Python clients send as the engine does", () => {
  it("answers a GET that carries a JSON body (requests.get(url, json={})) as the engine does, not as an outage", async () => {
    const f = await facade(30, engine, undefined, { peerUid: null });
    for (const path of ["/get_reward_history", "/get_engine_status?x=1"]) {
      const direct = await rawRequest(engine.baseUrl + path, "GET", "{}", engine.tokens.trainer);
      expect(direct.status).toBe(200);
      const viaFacade = await rawRequest(f.url + path, "GET", "{}");
      expect({ path, ...viaFacade }).toEqual({ path, ...direct });
    }
    // With coalescing off even the plain status read fails.
    const g = await facade(0, engine, undefined, { peerUid: null });
    const direct = await rawRequest(engine.baseUrl + "/get_engine_status", "GET", "{}", engine.tokens.trainer);
    expect(await rawRequest(g.url + "/get_engine_status", "GET", "{}")).toEqual(direct);
  });

  it("serves a served path with one trailing slash as its route, as the engine does", async () => {
    const f = await facade(30, engine, undefined, { peerUid: null });
    const direct = await ex.newEngine();
    for (const [method, path, body] of [
      ["POST", "/update_engine_status/", JSON.stringify({ engine_status: "ENGINE.ROLLING" })],
      ["POST", "/register_episode/", JSON.stringify({ episode_uuid: "slash-1" })],
      ["POST", "/is_episode_claimed/", JSON.stringify({ episode_uuid: "slash-1" })],
      ["GET", "/get_engine_status/", undefined],
    ] as const) {
      const want = await rawRequest(direct.baseUrl + path, method, body, direct.tokens.trainer);
      expect({ path, status: want.status }).toEqual({ path, status: 200 });
      const got = await rawRequest(f.url + path, method, body);
      expect({ path, ...got }).toEqual({ path, ...want });
    }
  });

  it("passes the engine's Retry-After on with its answer (a rate limit, storage full)", async () => {
    proxy.fault = (path) => (path.endsWith("/get_engine_status") || path.endsWith("/update_engine_status") ? "429" : "pass");
    const f = await facade(0, engine, undefined, { peerUid: null });
    for (const [method, path, body] of [["GET", "/get_engine_status", undefined], ["POST", "/update_engine_status", JSON.stringify({ engine_status: "ENGINE.ROLLING" })]] as const) {
      const res = await fetch(f.url + path, { method, headers: { "content-type": "application/json" }, ...(body === undefined ? {} : { body }) });
      expect([res.status, res.headers.get("retry-after")]).toEqual([429, "7"]);
      expect(await res.json()).toMatchObject({ error: "rate_limited" });
    }
  });
});
