/**
 * Test harness: talks to the real Worker (its default export, inside workerd) through the
 * project's typed clients, and reaches into an engine's Durable Object only to move its clock.
 */
import { runInDurableObject, runDurableObjectAlarm } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { AdminClient, EngineClient, type FetchLike } from "../../src/client";
import { verifyClaimKey, type ClaimKeyFields } from "../../src/auth/claim-key";
import type { EngineObject } from "../../src/engine/engine-object";
import type { Role } from "../../src/protocol/admin";

export const ORIGIN = "http://exchange.test";
export const ADMIN_TOKEN = "test-admin-token";

export const workerFetch: FetchLike = (input, init) => exports.default.fetch(new Request(input, init));

export const admin = new AdminClient({ origin: ORIGIN, adminToken: ADMIN_TOKEN, fetch: workerFetch });

let counter = 0;
export const uniqueName = (prefix = "eng"): string => `${prefix}-${Date.now().toString(36)}-${(counter++).toString(36)}`;

export type TestEngine = {
  name: string;
  tokens: Record<Role, string>;
  tokenIds: Record<Role, string>;
  /** A client for the engine with `role`'s token as a bearer header. */
  as(role: Role | "admin"): EngineClient;
  /** A client that carries the token in the base URL path, as unmodified AgentJet clients do. */
  viaUrl(role: Role): EngineClient;
  stub: DurableObjectStub<EngineObject>;
  clock: { t: number };
};

/**
 * A new engine, named `<prefix>-<unique>` or exactly `opts.name` (to make a deleted one again).
 * Its stub addresses the object by name alone: workerd has no jurisdictions, so an engine given
 * one lives in the same object locally (http/engine-stub.ts).
 */
export async function createEngine(prefix?: string, opts: { name?: string } & Parameters<AdminClient["createEngine"]>[1] = {}): Promise<TestEngine> {
  const { name: exact, ...placement } = opts;
  const created = await admin.createEngine(exact ?? uniqueName(prefix), placement);
  const name = created.engine;
  const tokens = created.tokens as Record<Role, string>;
  const stub = env.ENGINE.get(env.ENGINE.idFromName(name));
  // Far in the future: an alarm set on this clock never fires by real time, only when a test
  // runs it (a clock in the past would make workerd fire every alarm at once, over and over).
  const clock = { t: Date.UTC(2099, 0, 1) };
  await runInDurableObject(stub, (instance: EngineObject) => {
    instance.now = () => clock.t;
  });
  return {
    name,
    tokens,
    tokenIds: created.token_ids as Record<Role, string>,
    as: (role) => new EngineClient({ baseUrl: `${ORIGIN}/e/${name}`, token: role === "admin" ? ADMIN_TOKEN : tokens[role], fetch: workerFetch }),
    viaUrl: (role) => new EngineClient({ baseUrl: `${ORIGIN}/e/${name}/t/${tokens[role]}`, fetch: workerFetch }),
    stub,
    clock,
  };
}

/**
 * A new stub for an engine whose object was reset (ctx.abort): stubs of the old instance stay
 * broken. The new instance gets the test's clock again.
 */
export async function reconnect(engine: TestEngine): Promise<void> {
  engine.stub = env.ENGINE.get(env.ENGINE.idFromName(engine.name));
  await runInDurableObject(engine.stub, (instance: EngineObject) => {
    instance.now = () => engine.clock.t;
  });
}

/** Moves the engine's clock forward and runs its alarm, as if that much time had passed. */
export async function advance(engine: TestEngine, ms: number): Promise<boolean> {
  engine.clock.t += ms;
  return runDurableObjectAlarm(engine.stub);
}

/** Puts an engine in ROLLING with `n` registered episodes named `<prefix>-<i>`. */
export async function rollingWith(engine: TestEngine, n: number, opts: { zmq?: boolean; prefix?: string; step?: number } = {}): Promise<string[]> {
  const trainer = engine.as("trainer");
  await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: opts.step ?? 0 });
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const id = `${opts.prefix ?? "ep"}-${i}`;
    const r = await trainer.registerEpisode({
      episode_uuid: id,
      openai_base_url: "http://trainer.internal:8000/v1",
      openai_api_key: `sk-ajet-secret-${i}`,
      zmq_listen_result_addr: opts.zmq ? `tcp://10.0.0.1:${20000 + i}` : "",
    });
    if (!r.success) throw new Error(`register failed: ${r.failure_reason}`);
    ids.push(id);
  }
  return ids;
}

/** The engine's agent reports an inference gateway (a heartbeat), so that relayed calls are admitted; `gatewayUrl` null: that it has none. */
export async function withGateway(e: TestEngine, gatewayUrl: string | null = "http://gpu-node-1:10087"): Promise<void> {
  await e.as("trainer").heartbeat({
    agent_id: "agent-1",
    host: "gpu-node-1",
    pid: 1,
    version: "0.1.0",
    trainer: { state: "running", pid: 2, started_at: null },
    gateway_url: gatewayUrl,
  });
}

/** Sends a raw request to the Worker, for the malformed inputs the typed client cannot make. */
export async function raw(path: string, init: { method?: string; token?: string; body?: string; headers?: Record<string, string> } = {}) {
  const headers: Record<string, string> = { ...(init.headers ?? {}) };
  if (init.token) headers["authorization"] = `Bearer ${init.token}`;
  if (init.body !== undefined && !headers["content-type"]) headers["content-type"] = "application/json";
  const res = await workerFetch(`${ORIGIN}${path}`, { method: init.method ?? (init.body === undefined ? "GET" : "POST"), headers, body: init.body ?? null });
  const text = await res.text();
  return { status: res.status, json: jsonOrNull(text) as Record<string, unknown> | null, text };
}

/** The JSON `text` holds, or null if it is not JSON. */
export function jsonOrNull(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

export function endBody(client_uuid: string, episode_uuid: string, reward: number | number[] | null, task_id = "task-1", extra: Record<string, unknown> = {}) {
  return {
    client_uuid,
    episode_uuid,
    task_id,
    workflow_output: { reward, is_success: true, metadata: { task_id }, log_metrics: {} },
    ...extra,
  };
}

export const engineStats = (engine: TestEngine) => engine.stub.stats();

/** What a per-claim key handed out by claim_episode names (engine, incarnation, episode, fence), as the relay reads it. */
export async function claimKeyFields(key: string): Promise<ClaimKeyFields> {
  const fields = await verifyClaimKey(env.CLAIM_KEY_SECRET, key);
  if (fields === null) throw new Error(`not a per-claim key of this exchange: ${key}`);
  return fields;
}
