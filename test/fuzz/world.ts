/**
 * The engine the fuzzer works on, built the same way for every run (so a failing seed replays
 * against the same state), and a snapshot of everything its read routes show.
 *
 * The state has something in every corner a request can reach: episodes registered, claimed
 * and ended, a reward history, buffer groups pending and ready, queued agent commands, an agent
 * heartbeat, a runs catalog with a selected environment, a pending run and an inference test,
 * recorded LLM calls of ended, aborted and live claims (the trajectory ledger), Atropos's API
 * with a trainer, environments and groups queued and buffered, and a revoked token; some of its names are not Latin-1 (an emoji, NUL, a bidi control).
 * Generated requests name these by fixed values (arbitraries.ts DICTIONARY, seeds.ts) or, for
 * what the exchange makes up (tokens, run ids, claim keys), by world references, which `send`
 * fills in.
 */
import { env } from "cloudflare:workers";
import type { Role } from "../../src/protocol/admin";
import { ADMIN_TOKEN, admin, advance, claimKeyFields, createEngine, endBody, ORIGIN, workerFetch, type TestEngine } from "../support/harness";
import { runsAs, sampleCatalog } from "../support/runs";
import { MAX_BODY_BYTES } from "../../src/http/body";
import { isWellFormed } from "../../src/protocol/limits";
import { packFloats, packInts } from "../../src/protocol/packed";
import type { CallBatch, CallRecord } from "../../src/protocol/ledger";
import { DEEP_MARKER, isRelayPath, type Body, type FuzzRequest, type Value } from "./arbitraries";
import { ATROPOS_REGISTRATION, atroposGroup } from "./seeds";
import { JSON_LINES, parametersOf, type Doc, type Operation } from "./document";

export type World = {
  engine: TestEngine;
  /** A second engine, whose tokens must not open this one. */
  foreign: TestEngine;
  runId: string;
  testId: string;
  /** The per-claim key of the live claim (ep-2), and that of an aborted claim (ep-1). */
  claimKey: string;
  staleClaimKey: string;
  revokedToken: string;
  revokedTokenId: string;
};


export async function buildWorld(foreign: TestEngine): Promise<World> {
  const e = await createEngine("fuzz");
  // The runs' configuration lives in D1 and the revoked token in the admin's tables: built beside
  // the engine's own state. Whatever queues agent commands runs in one order, so that their seq
  // numbers are the same in every world.
  const [engine, , revoked] = await Promise.all([engineState(e), runsConfig(e), revokedToken(e)]);
  const run = await runsAs(e, "operator").startRun();
  const test = await runsAs(e, "operator").startInferenceTest({ models: [{ model: "m-1", base_url: "http://127.0.0.1:9/v1" }] });
  await recordCalls(e, engine.claims);
  await atroposState(e);
  // One tick of the engine's alarm: its outbox writes the ended and the aborted claim to D1,
  // where the trajectory list reads them.
  await advance(e, 1000);
  return { engine: e, foreign, runId: run.run_id, testId: test.test_id, claimKey: engine.claimKey, staleClaimKey: engine.staleClaimKey, revokedToken: revoked.token, revokedTokenId: revoked.id };
}

/** The per-claim keys (and so episode and fence) of the claims with recorded calls, and their clients. */
type Claims = Record<"ended" | "aborted" | "live", { key: string; client: string }>;

async function engineState(e: TestEngine): Promise<{ claimKey: string; staleClaimKey: string; claims: Claims }> {
  const as = (r: Role) => e.as(r);
  await as("operator").syncTrainConfig("trainer:\n  lr: 1e-5\n");
  await as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 0, weight_version: 0 });
  await as("trainer").batchRegisterEpisodes({
    episodes: ["ep-0", "ep-1", "ep-2", "ep-😀", "ep-3"].map((id) => ({
      episode_uuid: id,
      openai_base_url: "http://127.0.0.1:9/v1",
      openai_api_key: `sk-ajet-secret-${id}`,
      zmq_listen_result_addr: id === "ep-1" ? "tcp://127.0.0.1:20001" : "",
    })),
  });
  await as("trainer").startRollout({ num_repeat_per_sample: 2, job_session: "fuzz-job" });
  // ep-0 claimed and ended (a finished row, a trajectory), then the step moves on so the reward
  // history has an entry.
  const ended = await as("client").claimEpisode({ client_uuid: "c-1", discard_episode_timeout: 600 });
  await as("client").endEpisode(endBody("c-1", "ep-0", 0.5, "t-1"));
  await as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1, weight_version: 1 });
  // ep-1 claimed by c-1 and aborted: its key is stale, and its runner owes a reset ack (it has a
  // ZeroMQ address). ep-2 claimed by c-2: the live claim.
  const stale = await as("client").claimEpisode({ client_uuid: "c-1", discard_episode_timeout: 600 });
  await as("client").abortEpisode({ client_uuid: "c-1", episode_uuid: stale.episode_uuid });
  const live = await as("client").claimEpisode({ client_uuid: "c-2", discard_episode_timeout: 600, throttle_policy: { ratio: 1.5, expected_batch_size: 4, expected_num_repeat: 2, current_task_id: "t-2" } });
  // ep-😀 claimed by c-😀, sooner to expire: names that are not Latin-1 in every view of claims.
  const odd = await as("client").claimEpisode({ client_uuid: "c-😀", discard_episode_timeout: 300, throttle_policy: { ratio: 1, current_task_id: "t-\u202e😀" } });
  if (stale.episode_uuid !== "ep-1" || live.episode_uuid !== "ep-2" || odd.episode_uuid !== "ep-😀") throw new Error(`world: claims got ${stale.episode_uuid}, ${live.episode_uuid}, ${odd.episode_uuid}`);
  // The buffer: g-1 ready (two completed sessions), g-2 pending (one open session).
  const step = (session_id: string, group_id: string, is_session_completed: boolean) => ({
    session_id,
    group_id,
    step_index: 0,
    messages: [{ role: "user", content: `question of ${group_id}` }],
    response: "42",
    reward: 1,
    is_session_completed,
    weight_version: 1,
  });
  await as("client").postSteps({ steps: [step("s-1", "g-1", true), step("s-2", "g-1", true), step("s-3", "g-2", false), step("s-😀", "g-\u0000😀", false)] });
  await as("trainer").heartbeat({ agent_id: "agent-1", host: "gpu-1", pid: 10, version: "1", trainer: { state: "running", pid: 11, started_at: null } });
  await as("trainer").updatePoolInfo({ sample_collection_method: "fuzz", completed_episodes: 1, completed_tasks_details: { "t-1": ["ep-0"] } });
  return {
    claimKey: live.openai_api_key,
    staleClaimKey: stale.openai_api_key,
    claims: { ended: { key: ended.openai_api_key, client: "c-1" }, aborted: { key: stale.openai_api_key, client: "c-1" }, live: { key: live.openai_api_key, client: "c-2" } },
  };
}

/** The batch the world's gateway sent (seeds.ts sends it again, and other calls under its id). */
export const WORLD_BATCH_ID = "world-batch-1";

/**
 * The calls the engine's gateway recorded, sent as it sends them: ep-0's one call before it
 * ended, ep-1's failed call, and the live ep-2's two turns with token ids, the second stored as
 * what it adds to the first. Times are the engine's clock's, so every world records the same.
 */
async function recordCalls(e: TestEngine, claims: Claims): Promise<void> {
  const t = e.clock.t;
  const user = { role: "user", content: "What is 6 times 7?" };
  const answer = { role: "assistant", content: "42" };
  const call = async (claim: Claims[keyof Claims], id: string, at: number, over: Partial<CallRecord>): Promise<CallRecord> => {
    const k = await claimKeyFields(claim.key);
    return {
      call_id: id,
      capture: "tokens",
      client_uuid: claim.client,
      task_id: "t-2",
      weight_version: 1,
      run: 1,
      admitted_at: at,
      episode_uuid: k.episode_uuid,
      fence: k.fence,
      endpoint: "/v1/chat/completions",
      model: "m-1",
      stream: false,
      started_at: at + 1,
      first_byte_at: at + 5,
      done_at: at + 9,
      status: 200,
      error: null,
      finish_reason: "stop",
      usage: { prompt_tokens: 3, completion_tokens: 1 },
      truncated: false,
      body: { params: { temperature: 1 }, tools: null, tools_from_prefix: false, prefix: null, messages: [user], answer, tokens: { prompt_prefix: null, prompt_ids: packInts([1, 2, 3]), completion_ids: packInts([42]), completion_logprobs: packFloats([-0.5]) } },
      ...over,
    };
  };
  const first = await call(claims.live, "call-w-2a", t - 900, {});
  const calls: CallBatch["calls"] = [
    await call(claims.ended, "call-w-0", t - 5000, { task_id: "t-1" }),
    await call(claims.aborted, "call-w-1", t - 3000, { task_id: "t-1", status: 502, error: "upstream_error: connection refused", finish_reason: null, usage: null, first_byte_at: null, body: { params: {}, tools: null, tools_from_prefix: false, prefix: null, messages: [user], answer: null, tokens: null } }),
    first,
    await call(claims.live, "call-w-2b", t - 800, {
      stream: true,
      body: {
        params: { temperature: 1 },
        tools: null,
        tools_from_prefix: true,
        prefix: { call_id: first.call_id, count: 2 },
        messages: [{ role: "user", content: "And 6 times 8?" }],
        answer: { role: "assistant", content: "48" },
        tokens: { prompt_prefix: { call_id: first.call_id, count: 4 }, prompt_ids: packInts([7, 8]), completion_ids: packInts([48]), completion_logprobs: packFloats([-0.25]) },
      },
    }),
  ];
  const res = await workerFetch(`${ORIGIN}/e/${e.name}/agent/calls`, {
    method: "POST",
    headers: { authorization: `Bearer ${e.tokens.trainer}`, "content-type": "application/json" },
    body: JSON.stringify({ batch_id: WORLD_BATCH_ID, calls } satisfies CallBatch),
  });
  if (res.status !== 200) throw new Error(`world: recording its calls answered ${res.status}: ${await res.text()}`);
}

/** A request to the engine's Atropos API as `role`, the token in the URL as Atropos's clients send it. */
export async function atroposCall(e: TestEngine, role: Role, method: "GET" | "POST", path: string, body?: unknown): Promise<Answer> {
  const res = await workerFetch(`${ORIGIN}/e/${e.name}/t/${e.tokens[role]}/atropos${path}`, {
    method,
    ...(body === undefined ? {} : { headers: { "content-type": "application/json" }, body: JSON.stringify(body) }),
  });
  return { status: res.status, contentType: res.headers.get("content-type"), text: await res.text() };
}

/**
 * Atropos's API in use: a trainer registered and started (its first batch taken), two
 * environments, a group queued and a smaller one waiting in its env's buffer.
 */
async function atroposState(e: TestEngine): Promise<void> {
  const call = async (role: Role, method: "GET" | "POST", path: string, body?: unknown): Promise<void> => {
    const a = await atroposCall(e, role, method, path, body);
    if (a.status !== 200) throw new Error(`world: Atropos ${method} ${path} answered ${a.status}: ${a.text}`);
  };
  await call("trainer", "POST", "/register", ATROPOS_REGISTRATION);
  await call("trainer", "GET", "/batch");
  for (const name of ["gsm8k", "countdown"]) await call("client", "POST", "/register-env", { max_token_length: 1024, desired_name: name, weight: 1, group_size: 2, min_batch_allocation: null });
  await call("client", "POST", "/scored_data", atroposGroup(2, 0));
  await call("client", "POST", "/scored_data", atroposGroup(1, 1));
}

/** A catalog, a locked field, a selected environment with an edit. */
async function runsConfig(e: TestEngine): Promise<void> {
  await runsAs(e, "trainer").reportCatalog(sampleCatalog());
  await runsAs(e, "operator").setLockedFields({ set: [{ section: "env", name: "max_token_length", value: 8192 }] });
  await runsAs(e, "operator").selectEnvironment({ name: "gsm8k" });
  await runsAs(e, "operator").editConfig("group_size", 4);
}

async function revokedToken(e: TestEngine): Promise<{ token: string; id: string }> {
  const t = await admin.issueToken(e.name, "client", "revoked by the fuzz world");
  await admin.revokeToken(e.name, t.id);
  return t;
}

export type Snapshot = Record<string, unknown>;

type ReadRoute = { path: string; method: "GET" | "POST"; op: Operation; query: string; pages: boolean };

/**
 * The routes a snapshot reads: every documented GET under an engine (bearer form), the engine's
 * one read by POST (get_episode_buffer), and the admin's lists; those with query parameters
 * also with each integer at its documented minimum (a page of one), and those with a `cursor`
 * page by page to the end. GETs the document marks `x-changes-state` are left out (the agent's
 * command poll leases what it returns; Atropos's /batch, /status-env, /reset_data), and so is
 * the relay's /v1/models (a claim's key
 * reads it, not the admin's token), and the metrics (below). The ledger's export is read once, whole: it is
 * every trajectory the list pages through, and its filters are the list's.
 */
export function readRoutes(doc: Doc): ReadRoute[] {
  const reads: ReadRoute[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    const bearerForm = path.startsWith("/e/{engine}/") && !path.includes("{token}");
    const post = item["post"];
    if (bearerForm && path.endsWith("/get_episode_buffer") && post) reads.push({ path, method: "POST", op: post, query: "", pages: false });
    const op = item["get"];
    if (!op || op["x-changes-state"] === true || isRelayPath(path) || !(bearerForm || path === "/admin/engines" || path === "/admin/engines/{name}/tokens")) continue;
    // The metrics are the overview's and the buffer's health in another format (both read here),
    // with the relay's refusals among them by design, as withoutRefusalCounts takes them out of those.
    if (path.endsWith("/metrics")) continue;
    const query = parametersOf(doc, op).filter((p) => p.in === "query");
    const lines = op.responses["200"]?.content?.[JSON_LINES] !== undefined;
    const pages = !lines && query.some((p) => p.name === "cursor");
    reads.push({ path, method: "GET", op, query: "", pages });
    if (lines) continue;
    for (const p of query) if (p.schema["type"] === "integer" && typeof p.schema["minimum"] === "number") reads.push({ path, method: "GET", op, query: `${p.name}=${p.schema["minimum"]}`, pages });
  }
  return reads;
}

/** What a read shows: a JSON answer parsed, any other (JSON lines) as its text. */
export type View = { status: number; contentType: string | null; body: unknown };

async function read(path: string, method: "GET" | "POST"): Promise<View> {
  const res = await workerFetch(`${ORIGIN}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(method === "POST" ? { "content-type": "application/json" } : {}) },
    ...(method === "POST" ? { body: "{}" } : {}),
  });
  const contentType = res.headers.get("content-type");
  const text = await textOf(res);
  let body: unknown = text;
  if (!(contentType ?? "").startsWith(JSON_LINES)) {
    try {
      body = JSON.parse(text);
    } catch {
      // kept as text: the check below says what is wrong with it
    }
  }
  return { status: res.status, contentType, body };
}

const decoder = new TextDecoder();

/** A body as text, read as bytes: workerd warns on `.text()` of a type it does not know as text (JSON lines). */
const textOf = async (res: Response): Promise<string> => decoder.decode(await res.arrayBuffer());

/** The most claims whose trajectories a snapshot reads one by one. */
const MAX_CLAIMS_READ = 24;

/**
 * The engine's claims the ledger knows (a recorded call, or an end in D1), for the routes that
 * name one. An episode_uuid that a URL cannot carry as one path segment (`.` and `..`, which the
 * URL parser resolves away, and lone surrogates, which encodeURIComponent refuses) is left out:
 * no client can ask for it by name either.
 */
async function ledgerClaims(engine: string): Promise<{ episode: string; fence: number }[]> {
  const { results } = await env.DB.prepare(
    `SELECT episode_uuid AS episode, fence FROM llm_calls WHERE engine = ?1 UNION SELECT episode_uuid, fence FROM trajectories WHERE engine = ?1
     ORDER BY episode, fence LIMIT ${MAX_CLAIMS_READ}`,
  )
    .bind(engine)
    .all<{ episode: string; fence: number }>();
  return results.filter((c) => c.episode !== "." && c.episode !== ".." && isWellFormed(c.episode));
}

/** The engine's call bodies in R2 (their objects' names and sizes): a refused batch must not write one. */
async function r2Objects(engine: string): Promise<{ key: string; size: number }[]> {
  const out: { key: string; size: number }[] = [];
  let cursor: string | undefined;
  do {
    const page = await env.LEDGER.list({ prefix: `ledger/${encodeURIComponent(engine)}/`, ...(cursor === undefined ? {} : { cursor }) });
    out.push(...page.objects.map((o) => ({ key: o.key, size: o.size })));
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor !== undefined);
  return out;
}

/**
 * Everything the engine shows, as the admin (who sees the trainer's secrets too): its views, its
 * training runs (each run the list shows, not just the world's), the trajectories of the claims
 * its ledger holds (each one, and the export of them all) and its media, the admin's lists of engines and of
 * its tokens, the object's own queue sizes and alarm, its rows in D1 (llm_calls and trajectories
 * among them) and its call bodies in R2. Each view is also handed to `check` with its operation,
 * so that what the views show is held to the document too.
 */
export async function snapshot(world: World, reads: ReadRoute[], check: (op: Operation, view: View) => void): Promise<Snapshot> {
  const e = world.engine;
  const [listed, claims, objects] = await Promise.all([read(`/e/${e.name}/runs?limit=100`, "GET"), ledgerClaims(e.name), r2Objects(e.name)]);
  // The ledger's media (docs/ledger.md, "Media"), by the digest their key ends with.
  const media = [...new Set(objects.map((o) => /\/media\/([0-9a-f]{64})$/.exec(o.key)?.[1]).filter((d): d is string => d !== undefined))];
  const runIds = [...new Set([world.runId, ...((listed.body as { runs?: { run_id: string }[] }).runs ?? []).map((r) => r.run_id)])];
  /** A route's path for each thing it may name: every run, every claim of the ledger. */
  const instances = (path: string): string[] => {
    const p = path.replace("{engine}", e.name).replace("{name}", e.name).replace("{test_id}", world.testId);
    if (p.includes("{run_id}")) return runIds.map((id) => p.replace("{run_id}", id));
    if (p.includes("{sha256}")) return media.map((d) => p.replace("{sha256}", d));
    if (p.includes("{fence}")) return claims.map((c) => p.replace("{episode_uuid}", encodeURIComponent(c.episode)).replace("{fence}", String(c.fence)));
    if (p.includes("{episode_uuid}")) return [...new Set(claims.map((c) => c.episode))].map((ep) => p.replace("{episode_uuid}", encodeURIComponent(ep)));
    return [p];
  };
  const routes = reads.flatMap((r) => instances(r.path).map((path) => ({ ...r, path })));
  /** A route's view, and for one that pages, each next page until there is none (at most 10). */
  const pagesOf = async (r: (typeof routes)[number]): Promise<[string, View][]> => {
    const out: [string, View][] = [];
    let query = r.query;
    for (let page = 0; page < 10; page++) {
      const url = query === "" ? r.path : `${r.path}?${query}`;
      const view = await read(url, r.method);
      check(r.op, view);
      out.push([`${r.method} ${url}`, withoutRefusalCounts(view)]);
      const next = (view.body as { next_cursor?: unknown } | null)?.next_cursor;
      if (!r.pages || typeof next !== "string") break;
      query = new URLSearchParams([...new URLSearchParams(r.query), ["cursor", next]]).toString();
    }
    return out;
  };
  // Reads only, so they may overlap: the snapshot is most of the suite's time.
  const [views, stats, d1, r2] = await Promise.all([Promise.all(routes.map(pagesOf)), e.stub.stats(), d1Rows(e.name), r2Objects(e.name)]);
  const out: Snapshot = Object.fromEntries(views.flat());
  out["engine stats"] = stats;
  out["D1"] = d1;
  out["R2"] = r2;
  return out;
}

/**
 * A view without the overview's counts of relayed calls that failed (relay.failures and
 * last_failure): a refused call is counted there by design, as a log line would be (docs/relay.md),
 * and is no change of the engine's state.
 */
function withoutRefusalCounts(view: View): View {
  const relay = (view.body as { relay?: { failures?: unknown } } | null)?.relay;
  if (typeof relay !== "object" || relay === null || !("failures" in relay)) return view;
  const { failures: _failures, last_failure: _last, ...rest } = relay as Record<string, unknown>;
  return { ...view, body: { ...(view.body as Record<string, unknown>), relay: rest } };
}

type Table = { name: string; hasEngine: boolean };
let tables: Promise<Table[]> | undefined;

async function listTables(): Promise<Table[]> {
  const names = await env.DB.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE 'd1_%' AND name NOT LIKE '_cf_%'").all<{ name: string }>();
  const out: Table[] = [];
  for (const { name } of names.results) {
    const cols = await env.DB.prepare("SELECT name FROM pragma_table_info(?)").bind(name).all<{ name: string }>();
    out.push({ name, hasEngine: cols.results.some((c) => c.name === "engine") });
  }
  return out;
}

/**
 * D1 as far as it holds the engine: its rows of every table keyed by engine (what the outbox and
 * the runs API write), and the row counts of the others (a run's processes, events, metrics).
 */
async function d1Rows(engine: string): Promise<Record<string, unknown>> {
  const all = await (tables ??= listTables());
  const results = await env.DB.batch(
    all.map((t) => (t.hasEngine ? env.DB.prepare(`SELECT * FROM "${t.name}" WHERE engine = ?`).bind(engine) : env.DB.prepare(`SELECT COUNT(*) AS n FROM "${t.name}"`))),
  );
  return Object.fromEntries(all.map((t, i) => [t.name, results[i]?.results]));
}

// ------------------------------------------------------------------ sending a generated request

const encoder = new TextEncoder();

/** The world references that name one of the world's own strings. */
const OWN = ["runId", "testId", "revokedToken", "revokedTokenId", "claimKey", "staleClaimKey"] as const;
const isOwn = (k: string): k is (typeof OWN)[number] => (OWN as readonly string[]).includes(k);

/** A world reference's value for this world. */
export function valueIn(world: World, v: Value): string {
  if ("literal" in v) return v.literal;
  const e = world.engine;
  const [kind, role] = v.world.split(":") as [string, Role | "admin" | undefined];
  if (isOwn(kind)) return world[kind];
  switch (kind) {
    case "engine":
      return e.name;
    case "foreignEngine":
      return world.foreign.name;
    case "token":
      return role === "admin" ? ADMIN_TOKEN : e.tokens[role as Role];
    case "foreignToken":
      return world.foreign.tokens[role as Role];
    case "tokenId":
      return e.tokenIds[role as Role];
    default:
      throw new Error(`no world value ${v.world}`);
  }
}

/**
 * A header value as a careful HTTP client sends it: ASCII, its other characters percent-encoded
 * as UTF-8 (workerd would send them raw as UTF-8, warning each time), without the NUL, CR and LF
 * that no header may carry.
 */
const asHeaderValue = (s: string): string =>
  s.replace(/[\0\r\n]/g, "").replace(/[^\x20-\x7e\t]/gu, (c) => [...encoder.encode(c)].map((b) => `%${b.toString(16).padStart(2, "0")}`).join(""));

let pad: string | undefined;

function bodyOf(b: Body): BodyInit | null {
  switch (b.kind) {
    case "none":
      return null;
    case "json":
      return (JSON.stringify(b.value) ?? "").replace(DEEP_MARKER, (_, depth: string) => "[".repeat(Number(depth)) + "]".repeat(Number(depth)));
    case "text":
      return b.text;
    case "bytes": {
      const bytes = encoder.encode(b.text);
      const at = b.at % (bytes.length + 1);
      return new Uint8Array([...bytes.subarray(0, at), b.byte, ...bytes.subarray(at)]);
    }
    case "oversized": {
      pad ??= "x".repeat(MAX_BODY_BYTES);
      const rest = JSON.stringify(b.value) ?? "";
      const text = rest.startsWith("{") && rest !== "{}" ? `{"pad": "${pad}", ${rest.slice(1)}` : `{"pad": "${pad}"}`;
      if (!b.chunked) return text;
      const chunks = [text.slice(0, 1 << 20), text.slice(1 << 20)];
      return new ReadableStream<Uint8Array>({
        pull(ctl) {
          const next = chunks.shift();
          if (next === undefined) ctl.close();
          else ctl.enqueue(encoder.encode(next));
        },
      });
    }
  }
}

export type Answer = { status: number; contentType: string | null; text: string };

/** Sends a generated request to the Worker, its world references filled in. Path values go in as they are: the URL parser encodes them. */
export async function send(world: World, req: FuzzRequest): Promise<Answer> {
  let path = req.path.replace(/\{(\w+)\}/g, (_, name: string) => valueIn(world, req.params[name] ?? { literal: "" }));
  if (req.query.length > 0) path += `?${new URLSearchParams(req.query).toString()}`;
  const headers = new Headers();
  for (const [k, v] of Object.entries(req.headers)) headers.set(k, v);
  if (req.authorization) headers.set("authorization", asHeaderValue(`${req.authorization.scheme}${valueIn(world, req.authorization.value)}${req.authorization.suffix}`));
  const res = await workerFetch(`${ORIGIN}${path}`, { method: req.method, headers, body: bodyOf(req.body) });
  return { status: res.status, contentType: res.headers.get("content-type"), text: await textOf(res) };
}
