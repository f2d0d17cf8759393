/**
 * The engine the fuzzer works on, built the same way for every run (so a failing seed replays
 * against the same state), and a snapshot of everything its read routes show.
 *
 * The state has something in every corner a request can reach: episodes registered, claimed
 * and ended, a reward history, buffer groups pending and ready, queued agent commands, an agent
 * heartbeat, a runs catalog with a selected environment, a pending run and an inference test,
 * and a revoked token; some of its names are not Latin-1 (an emoji, NUL, a bidi control).
 * Generated requests name these by fixed values (arbitraries.ts DICTIONARY, seeds.ts) or, for
 * what the exchange makes up (tokens, run ids, claim keys), by world references, which `send`
 * fills in.
 */
import { env } from "cloudflare:workers";
import type { Role } from "../../src/protocol/admin";
import { ADMIN_TOKEN, admin, createEngine, endBody, ORIGIN, workerFetch, type TestEngine } from "../support/harness";
import { runsAs, sampleCatalog } from "../support/runs";
import { MAX_BODY_BYTES } from "../../src/http/body";
import { DEEP_MARKER, type Body, type FuzzRequest, type Value } from "./arbitraries";
import { parametersOf, type Doc, type Operation } from "./document";

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
  return { engine: e, foreign, runId: run.run_id, testId: test.test_id, ...engine, revokedToken: revoked.token, revokedTokenId: revoked.id };
}

async function engineState(e: TestEngine): Promise<{ claimKey: string; staleClaimKey: string }> {
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
  await as("client").claimEpisode({ client_uuid: "c-1", discard_episode_timeout: 600 });
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
  return { claimKey: live.openai_api_key, staleClaimKey: stale.openai_api_key };
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
 * page by page to the end. The agent's command poll is left out: it is a GET that leases the
 * commands it returns.
 */
export function readRoutes(doc: Doc): ReadRoute[] {
  const reads: ReadRoute[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    const bearerForm = path.startsWith("/e/{engine}/") && !path.includes("{token}");
    const post = item["post"];
    if (bearerForm && path.endsWith("/get_episode_buffer") && post) reads.push({ path, method: "POST", op: post, query: "", pages: false });
    const op = item["get"];
    if (!op || !((bearerForm && !path.endsWith("/agent/commands")) || path === "/admin/engines" || path === "/admin/engines/{name}/tokens")) continue;
    const query = parametersOf(doc, op).filter((p) => p.in === "query");
    const pages = query.some((p) => p.name === "cursor");
    reads.push({ path, method: "GET", op, query: "", pages });
    for (const p of query) if (p.schema["type"] === "integer" && typeof p.schema["minimum"] === "number") reads.push({ path, method: "GET", op, query: `${p.name}=${p.schema["minimum"]}`, pages });
  }
  return reads;
}

type View = { status: number; body: unknown };

async function read(path: string, method: "GET" | "POST"): Promise<View> {
  const res = await workerFetch(`${ORIGIN}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(method === "POST" ? { "content-type": "application/json" } : {}) },
    ...(method === "POST" ? { body: "{}" } : {}),
  });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // kept as text: the check below says what is wrong with it
  }
  return { status: res.status, body };
}

/**
 * Everything the engine shows, as the admin (who sees the trainer's secrets too): its views, its
 * training runs (each run the list shows, not just the world's), the admin's lists of engines and
 * of its tokens, the object's own queue sizes and alarm, and its rows in D1. Each view is also
 * handed to `check` with its operation, so that what the views show is held to the document too.
 */
export async function snapshot(world: World, reads: ReadRoute[], check: (op: Operation, view: View) => void): Promise<Snapshot> {
  const e = world.engine;
  const listed = (await read(`/e/${e.name}/runs?limit=100`, "GET")).body as { runs?: { run_id: string }[] };
  const runIds = [...new Set([world.runId, ...(listed.runs ?? []).map((r) => r.run_id)])];
  const routes = reads.flatMap((r) =>
    (r.path.includes("{run_id}") ? runIds : [world.runId]).map((runId) => ({
      ...r,
      path: r.path.replace("{engine}", e.name).replace("{name}", e.name).replace("{run_id}", runId).replace("{test_id}", world.testId),
    })),
  );
  /** A route's view, and for one that pages, each next page until there is none (at most 10). */
  const pagesOf = async (r: (typeof routes)[number]): Promise<[string, View][]> => {
    const out: [string, View][] = [];
    let query = r.query;
    for (let page = 0; page < 10; page++) {
      const url = query === "" ? r.path : `${r.path}?${query}`;
      const view = await read(url, r.method);
      check(r.op, view);
      out.push([`${r.method} ${url}`, view]);
      const next = (view.body as { next_cursor?: unknown } | null)?.next_cursor;
      if (!r.pages || typeof next !== "string") break;
      query = new URLSearchParams([...new URLSearchParams(r.query), ["cursor", next]]).toString();
    }
    return out;
  };
  // Reads only, so they may overlap: the snapshot is most of the suite's time.
  const [views, stats, d1] = await Promise.all([Promise.all(routes.map(pagesOf)), e.stub.stats(), d1Rows(e.name)]);
  const out: Snapshot = Object.fromEntries(views.flat());
  out["engine stats"] = stats;
  out["D1"] = d1;
  return out;
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
  return { status: res.status, contentType: res.headers.get("content-type"), text: await res.text() };
}
