/**
 * Bad input: each gets a 4xx with a message that says what was wrong, and changes nothing.
 * Every case compares the engine's whole visible state before and after. And a failure of the
 * exchange itself: a 500 that says nothing of it but an id for the log.
 */
import { env, exports } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import { cachedTokenHash } from "../src/http/engine-caller";
import { parseRequestJson } from "../src/http/python-json";
import { DEFAULT_RELAY_MAX_BODY_BYTES } from "../src/protocol/relay-endpoint";
import { admin, ADMIN_TOKEN, createEngine, engineStats, ORIGIN, raw, rollingWith, workerFetch, type TestEngine } from "./support/harness";

async function snapshot(e: TestEngine) {
  const viewer = e.as("trainer");
  return {
    status: await viewer.getEngineStatus(),
    buffer: await viewer.getEpisodeBuffer(),
    history: await viewer.getRewardHistory(),
    stats: await engineStats(e),
  };
}

type Case = { name: string; path: string; role: "client" | "trainer" | "operator"; body: string; status: number; detail: RegExp; headers?: Record<string, string> };

const cases: Case[] = [
  { name: "malformed JSON", path: "claim_episode", role: "client", body: '{"client_uuid": "c",', status: 400, detail: /not valid JSON/ },
  { name: "a JSON array instead of an object", path: "claim_episode", role: "client", body: "[1,2]", status: 422, detail: /body: .*object/i },
  { name: "a missing field", path: "claim_episode", role: "client", body: JSON.stringify({ client_uuid: "c" }), status: 422, detail: /discard_episode_timeout/ },
  { name: "a wrong type", path: "claim_episode", role: "client", body: JSON.stringify({ client_uuid: "c", discard_episode_timeout: "60" }), status: 422, detail: /discard_episode_timeout: .*number/ },
  { name: "a negative timeout", path: "claim_episode", role: "client", body: JSON.stringify({ client_uuid: "c", discard_episode_timeout: -1 }), status: 422, detail: /positive/ },
  // The product of the two is pace's per-version fallback; a negative one is no count of anything.
  { name: "a negative expected_batch_size", path: "claim_episode", role: "client", body: JSON.stringify({ client_uuid: "c2", discard_episode_timeout: 60, throttle_policy: { expected_batch_size: -4, expected_num_repeat: 2, current_task_id: "t" } }), status: 422, detail: /throttle_policy.expected_batch_size: must not be negative/ },
  { name: "a negative expected_num_repeat", path: "claim_episode", role: "client", body: JSON.stringify({ client_uuid: "c2", discard_episode_timeout: 60, throttle_policy: { expected_batch_size: 4, expected_num_repeat: -2, current_task_id: "t" } }), status: 422, detail: /throttle_policy.expected_num_repeat: must not be negative/ },
  { name: "an unknown episode type", path: "claim_episode", role: "client", body: JSON.stringify({ client_uuid: "c", episode_type: "play", discard_episode_timeout: 5 }), status: 422, detail: /unknown episode_type "play"/ },
  { name: "an empty client uuid", path: "claim_episode", role: "client", body: JSON.stringify({ client_uuid: "", discard_episode_timeout: 5 }), status: 422, detail: /client_uuid: must not be empty/ },
  { name: "a reward that is not a number", path: "end_episode", role: "client", body: JSON.stringify({ client_uuid: "c", episode_uuid: "ep-0", task_id: "t", workflow_output: { reward: "high", metadata: { task_id: "t" } } }), status: 422, detail: /workflow_output.reward/ },
  { name: "an unknown episode", path: "end_episode", role: "client", body: JSON.stringify({ client_uuid: "c", episode_uuid: "ghost", task_id: "t", workflow_output: { reward: 1, metadata: { task_id: "t" } } }), status: 404, detail: /Episode ghost not found/ },
  { name: "an unknown status", path: "update_engine_status", role: "trainer", body: JSON.stringify({ engine_status: "ENGINE.DANCING" }), status: 422, detail: /unknown engine status "ENGINE.DANCING"/ },
  { name: "a negative global step", path: "update_engine_status", role: "trainer", body: JSON.stringify({ engine_status: "ENGINE.ROLLING", global_step: -2 }), status: 422, detail: /global_step/ },
  { name: "a register without episode_uuid", path: "register_episode", role: "trainer", body: JSON.stringify({ zmq_listen_result_addr: "tcp://x:1" }), status: 422, detail: /episode_uuid/ },
  { name: "a yaml that is not a string", path: "sync_train_config", role: "operator", body: JSON.stringify({ yaml_as_string: 42 }), status: 422, detail: /yaml_as_string/ },
  { name: "a d1_retention_days out of range", path: "buffer/config", role: "operator", body: JSON.stringify({ d1_retention_days: 3651 }), status: 422, detail: /d1_retention_days/ },
  { name: "a d1_retention_days that is a string", path: "buffer/config", role: "operator", body: JSON.stringify({ d1_retention_days: "30" }), status: 422, detail: /d1_retention_days/ },
  { name: "an ack with a bad seq", path: "agent/ack", role: "trainer", body: JSON.stringify({ seq: "one", ok: true }), status: 422, detail: /seq/ },
  {
    name: "a workflow output nested 100000 deep",
    path: "end_episode",
    role: "client",
    body: `{"client_uuid": "c", "episode_uuid": "ep-0", "task_id": "t", "workflow_output": {"reward": 1, "metadata": {"task_id": "t"}, "log_metrics": {"deep": ${"[".repeat(100_000)}${"]".repeat(100_000)}}}}`,
    status: 422,
    detail: /body: nests arrays and objects deeper than 128 levels/,
  },
  { name: "a run config value nested 100000 deep", path: "runs/config/edit", role: "operator", body: `{"field": "group_size", "value": ${"[".repeat(100_000)}${"]".repeat(100_000)}}`, status: 422, detail: /deeper than 128/ },
  // Written as JSON escapes: the body itself is valid UTF-8, the id it names is not valid Unicode.
  { name: "an episode id with a lone surrogate", path: "register_episode", role: "trainer", body: '{"episode_uuid": "ep-\\ud800"}', status: 422, detail: /episode_uuid: holds a lone surrogate/ },
  { name: "a session id with a lone surrogate", path: "steps", role: "client", body: '{"steps": [{"session_id": "s-\\udc00", "group_id": "g", "step_index": 0, "messages": [], "reward": 1}]}', status: 422, detail: /session_id: holds a lone surrogate/ },
  { name: "a task id with a lone surrogate", path: "end_episode", role: "client", body: '{"client_uuid": "c", "episode_uuid": "ep-0", "task_id": "t\\ud83d", "workflow_output": {"reward": 1, "metadata": {"task_id": "t\\ud83d"}}}', status: 422, detail: /task_id: holds a lone surrogate/ },
  { name: "an oversized body", path: "end_episode", role: "client", body: JSON.stringify({ client_uuid: "c", pad: "x".repeat(4 * 1024 * 1024 + 10) }), status: 413, detail: /exceeds 4194304 bytes/ },
];

describe("bad input changes nothing", () => {
  for (const c of cases) {
    it(`answers ${c.status} for ${c.name}`, async () => {
      const e = await createEngine();
      await rollingWith(e, 2);
      await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
      const before = await snapshot(e);
      const res = await raw(`/e/${e.name}/${c.path}`, { token: e.tokens[c.role], body: c.body, ...(c.headers ? { headers: c.headers } : {}) });
      expect(res.status).toBe(c.status);
      expect(res.json).toMatchObject({ error: expect.any(String), detail: expect.stringMatching(c.detail) });
      expect(await snapshot(e)).toEqual(before);
    });
  }
});

describe("query parameters", () => {
  it("refuses one given more than once (422, naming it) rather than reading one of its values", async () => {
    const e = await createEngine();
    for (const path of ["trajectories?run=1&run=2", "history/runs?limit=1&limit=5", "trajectories?task_id=a&limit=2&task_id=b"]) {
      const res = await raw(`/e/${e.name}/${path}`, { token: e.tokens.viewer });
      expect([res.status, res.json?.["error"]], path).toEqual([422, "invalid_request"]);
      expect(String(res.json?.["detail"]), path).toMatch(/^(run|limit|task_id): given more than once/);
    }
    expect((await raw(`/e/${e.name}/trajectories?run=1&limit=2`, { token: e.tokens.viewer })).status).toBe(200);
  });
});

describe("nesting", () => {
  it("counts only arrays and objects, not brackets inside strings, and takes 128 levels", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    const metrics = `${"[".repeat(125)}"[[[{{{"${"]".repeat(125)}`;
    const body = `{"client_uuid": "c", "episode_uuid": "ep-0", "task_id": "t", "workflow_output": {"reward": 1, "metadata": {"task_id": "t"}, "log_metrics": {"deep": ${metrics}, "text": "${"[".repeat(1000)}"}}}`;
    expect(await raw(`/e/${e.name}/end_episode`, { token: e.tokens.client, body })).toMatchObject({ status: 200, json: { success: true } });
  });
});

describe("Python's NaN and Infinity, as json.dumps writes them", () => {
  // reward=float("nan") from a Python client: the seed's pydantic float took it (allow_inf_nan).
  // The Worker may refuse a non-finite reward (it cannot average it), but must then say which
  // field and why; instead it says the body "is not valid JSON", which Python's json contradicts.
  it("end_episode with reward NaN is refused as a bad reward, not as malformed JSON", async () => {
    const e = await createEngine("py");
    await rollingWith(e, 2);
    const { episode_uuid } = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const before = await snapshot(e);
    for (const reward of ["NaN", "Infinity", "-Infinity", "[1.0, NaN]"]) {
      const body = `{"client_uuid": "c1", "episode_uuid": "${episode_uuid}", "task_id": "t1", "workflow_output": {"reward": ${reward}, "is_success": false, "metadata": {"task_id": "t1"}, "log_metrics": {}}}`;
      const r = await raw(`/e/${e.name}/end_episode`, { token: e.tokens.client, body });
      expect([reward, r.status, r.json?.["error"]]).toEqual([reward, 422, "invalid_request"]);
      expect(String(r.json?.["detail"])).toContain("workflow_output.reward: must be a finite number or a list of finite numbers");
    }
    const text = await raw(`/e/${e.name}/end_episode`, { token: e.tokens.client, body: JSON.stringify({ client_uuid: "c1", episode_uuid, task_id: "t1", workflow_output: { reward: "1", metadata: { task_id: "t1" } } }) });
    expect([text.status, text.json?.["detail"]]).toEqual([422, "workflow_output.reward: must be a finite number or a list of finite numbers"]);
    expect(await snapshot(e)).toEqual(before);
  });

  it("reads the bare tokens only where a value goes, outside strings: anything else stays malformed JSON", async () => {
    const e = await createEngine("py");
    for (const body of ["{NaN: 1}", '{"a": 1, NaN: 2}', '{"a": 1NaN}', '{"a": 1Infinity}', '{"a": 1.Infinity}', '{"a": -NaN}', '{"a": nan}', '{"a": NaNa}', '{"a": "NaN" NaN}']) {
      const r = await raw(`/e/${e.name}/start_engine`, { token: e.tokens.operator, body });
      expect([body, r.status, r.json?.["error"]]).toEqual([body, 400, "malformed_json"]);
    }
  });

  it("gives back every other value as sent: strings that spell the tokens, escaped quotes, and the characters NaN's stand-in could be", () => {
    const text = String.raw`{"s": "a \" NaN, Infinity \\", "k\u007f": "\u0080\u0081", "raw": "` + "\u0082\u007f" + String.raw`", "v": [NaN, Infinity, -Infinity, 1e999, -0.5, null], "n": {"x": NaN}}`;
    const v = parseRequestJson(text) as Record<string, unknown>;
    expect(v).toEqual({ s: 'a " NaN, Infinity \\', "k\u007f": "\u0080\u0081", raw: "\u0082\u007f", v: [Number.NaN, Infinity, -Infinity, Infinity, -0.5, null], n: { x: Number.NaN } });
    // The text holds every character the stand-in could be: its NaN cannot be told apart, and the text stays refused.
    const all = Array.from({ length: 0x9f - 0x7f + 1 }, (_, i) => String.fromCharCode(0x7f + i)).join("");
    expect(() => parseRequestJson(`{"s": "${all}", "v": NaN}`)).toThrow(SyntaxError);
    expect(parseRequestJson(`{"s": "${all}", "v": Infinity}`)).toEqual({ s: all, v: Infinity });
    // Valid JSON is JSON.parse's alone.
    expect(parseRequestJson('{"NaN": "Infinity"}')).toEqual({ NaN: "Infinity" });
  });
});

describe("access", () => {
  it("no token: 401; wrong role: 403; unknown engine: 404; bad or revoked token: 401", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const before = await snapshot(e);
    const claim = JSON.stringify({ client_uuid: "c", discard_episode_timeout: 5 });
    const none = await raw(`/e/${e.name}/claim_episode`, { body: claim });
    expect(none).toMatchObject({ status: 401, json: { error: "missing_token" } });
    const viewer = await raw(`/e/${e.name}/claim_episode`, { token: e.tokens.viewer, body: claim });
    expect(viewer).toMatchObject({ status: 403, json: { error: "forbidden", detail: "A viewer token may not call claim_episode." } });
    const trainer = await raw(`/e/${e.name}/claim_episode`, { token: e.tokens.trainer, body: claim });
    expect(trainer.status).toBe(403);
    const operator = await raw(`/e/${e.name}/register_episode`, { token: e.tokens.operator, body: JSON.stringify({ episode_uuid: "x" }) });
    expect(operator).toMatchObject({ status: 403, json: { detail: "An operator token may not call register_episode." } });
    const client = await raw(`/e/${e.name}/register_episode`, { token: e.tokens.client, body: JSON.stringify({ episode_uuid: "x" }) });
    expect(client.status).toBe(403);
    const op = await raw(`/e/${e.name}/agent/commands`, { token: e.tokens.operator });
    expect(op.status).toBe(403);
    const bogus = await raw(`/e/${e.name}/claim_episode`, { token: "rx_client_bogus", body: claim });
    expect(bogus).toMatchObject({ status: 401, json: { error: "invalid_token" } });
    const other = await createEngine();
    const foreign = await raw(`/e/${e.name}/claim_episode`, { token: other.tokens.client, body: claim });
    expect(foreign.status).toBe(401);
    const unknown = await raw(`/e/no-such-engine/claim_episode`, { token: e.tokens.client, body: claim });
    expect(unknown).toMatchObject({ status: 404, json: { error: "unknown_engine" } });
    const badName = await raw(`/e/NO_SUCH/claim_episode`, { token: e.tokens.client, body: claim });
    expect(badName.status).toBe(404);
    const urlBogus = await raw(`/e/${e.name}/t/rx_client_bogus/claim_episode`, { body: claim });
    expect(urlBogus.status).toBe(401);
    expect(await snapshot(e)).toEqual(before);
  });

  it("accepts the token in the base URL path and as a bearer header, and the admin token everywhere", async () => {
    const e = await createEngine();
    expect((await raw(`/e/${e.name}/t/${e.tokens.viewer}/get_engine_status`)).status).toBe(200);
    expect((await raw(`/e/${e.name}/get_engine_status`, { token: e.tokens.viewer })).status).toBe(200);
    expect((await e.as("admin").getEngineStatus()).engine_status).toBe("ENGINE.OFFLINE");
    expect((await raw(`/e/${e.name}/get_engine_status`, { headers: { authorization: "Basic abc" } })).status).toBe(401);
  });

  it("checks a body sent in chunks (no content-length) against the size limit as it arrives", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const before = await snapshot(e);
    const chunked = (parts: string[]) => {
      const enc = new TextEncoder();
      const body = new ReadableStream<Uint8Array>({
        start(ctl) {
          for (const p of parts) ctl.enqueue(enc.encode(p));
          ctl.close();
        },
      });
      const req = new Request(`${ORIGIN}/e/${e.name}/claim_episode`, { method: "POST", headers: { authorization: `Bearer ${e.tokens.client}` }, body });
      expect(req.headers.get("content-length")).toBe(null);
      return exports.default.fetch(req);
    };
    const big = await chunked(['{"client_uuid": "c", "pad": "', "x".repeat(3 * 1024 * 1024), "x".repeat(1024 * 1024 + 10), '", "discard_episode_timeout": 5}']);
    expect(big.status).toBe(413);
    expect(await big.json()).toMatchObject({ error: "payload_too_large", detail: expect.stringMatching(/exceeds 4194304 bytes/) });
    expect(await snapshot(e)).toEqual(before);
    const small = await chunked(['{"client_uuid": "c", ', '"discard_episode_timeout": 5}']);
    expect(await small.json()).toMatchObject({ success: true, client_uuid: "c", episode_uuid: "ep-0" });
    // A route the router serves gets the body its size check read.
    const enc = new TextEncoder();
    const parts = ['{"name": ', `"chunked-${e.name}"}`];
    const body = new ReadableStream<Uint8Array>({
      start(ctl) {
        for (const p of parts) ctl.enqueue(enc.encode(p));
        ctl.close();
      },
    });
    const created = await exports.default.fetch(new Request(`${ORIGIN}/admin/engines`, { method: "POST", headers: { authorization: `Bearer ${ADMIN_TOKEN}` }, body }));
    expect(created.status).toBe(201);
    expect(await created.json()).toMatchObject({ engine: `chunked-${e.name}` });
  });

  it("checks a body against the size limit as it arrives when its Content-Length is no number, or understates it", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const before = await snapshot(e);
    const engines = (await admin.listEngines()).engines.length;
    const send = (path: string, token: string, declared: string, body: string) =>
      exports.default.fetch(new Request(`${ORIGIN}${path}`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json", "content-length": declared }, body }));
    const pad = "x".repeat(4 * 1024 * 1024);
    for (const declared of ["abc", "12abc", "-1", "5"]) {
      // The engine API, served before the router, and a route the router serves (the admin API).
      const claim = await send(`/e/${e.name}/claim_episode`, e.tokens.client, declared, JSON.stringify({ client_uuid: "c", pad, discard_episode_timeout: 5 }));
      const create = await send("/admin/engines", ADMIN_TOKEN, declared, JSON.stringify({ name: `big-${e.name}`, pad }));
      for (const res of [claim, create]) {
        expect(res.status, `content-length ${declared}`).toBe(413);
        expect(await res.json()).toMatchObject({ error: "payload_too_large" });
      }
    }
    expect(await snapshot(e)).toEqual(before);
    expect((await admin.listEngines()).engines.length).toBe(engines);
    // A small body is read whatever its header says.
    const small = await send(`/e/${e.name}/claim_episode`, e.tokens.client, "abc", JSON.stringify({ client_uuid: "c", discard_episode_timeout: 5 }));
    expect(await small.json()).toMatchObject({ success: true, client_uuid: "c", episode_uuid: "ep-0" });
  });

  it("answers HEAD on an engine GET route as its GET without a body, and checks other paths under an engine before its 404", async () => {
    const e = await createEngine();
    const head = await workerFetch(`${ORIGIN}/e/${e.name}/get_engine_status`, { method: "HEAD", headers: { authorization: `Bearer ${e.tokens.viewer}` } });
    expect(head.status).toBe(200);
    expect(head.headers.get("content-type")).toBe("application/json");
    expect(await head.text()).toBe("");
    expect(await raw(`/e/${e.name}/no_such_route`)).toMatchObject({ status: 401, json: { error: "missing_token" } });
    expect(await raw(`/e/NO_SUCH/no_such_route`, { token: e.tokens.viewer })).toMatchObject({ status: 404, json: { error: "unknown_engine" } });
    expect(await raw(`/e/${e.name}/no_such_route`, { token: e.tokens.viewer })).toMatchObject({ status: 404, json: { error: "not_found" } });
    // A known path with the other method is not that route either.
    expect(await raw(`/e/${e.name}/claim_episode`, { token: e.tokens.client })).toMatchObject({ status: 404, json: { error: "not_found" } });
  });

  it("refuses a revoked token or another engine's token with 401 on a path under the engine that is no route, as on a route", async () => {
    const e = await createEngine();
    const other = await createEngine();
    await admin.revokeToken(e.name, e.tokenIds.viewer);
    expect(await raw(`/e/${e.name}/get_engine_status`, { token: e.tokens.viewer })).toMatchObject({ status: 401, json: { error: "invalid_token" } });
    expect(await raw(`/e/${e.name}/no_such_route`, { token: e.tokens.viewer })).toMatchObject({ status: 401, json: { error: "invalid_token" } });
    expect(await raw(`/e/${e.name}/t/${other.tokens.operator}/no_such_route`)).toMatchObject({ status: 401, json: { error: "invalid_token" } });
    // A token the engine knows still learns that the path is no route.
    expect(await raw(`/e/${e.name}/t/${e.tokens.operator}/no_such_route`)).toMatchObject({ status: 404, json: { error: "not_found" } });
  });

  it("refuses HEAD on a GET that changes state (405, Allow: GET), before it reaches the route", async () => {
    const e = await createEngine();
    const head = (path: string) => workerFetch(`${ORIGIN}/e/${e.name}/t/${e.tokens.trainer}${path}`, { method: "HEAD" });
    const atropos = (method: "GET" | "POST", path: string, body?: unknown) =>
      raw(`/e/${e.name}/t/${e.tokens.trainer}/atropos${path}`, { method, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    // Atropos's /batch hands a batch out once: a HEAD (a link checker, curl -I) must not take it.
    await atropos("POST", "/register", { wandb_group: "g", wandb_project: "p", batch_size: 2, max_token_len: 2048, checkpoint_dir: "/c", save_checkpoint_interval: 10, starting_step: 0, num_steps: 9 });
    await atropos("GET", "/batch");
    await atropos("POST", "/register-env", { max_token_length: 1024, desired_name: "x", weight: 1, group_size: 2, min_batch_allocation: null });
    await atropos("POST", "/scored_data", { tokens: [[7, 0], [7, 1]], masks: [[1, 1], [1, 1]], scores: [1, 0], env_id: 0 });
    await e.as("operator").syncTrainConfig("x: 1\n");
    await e.as("operator").startEngine();
    // With the one trailing slash too, which their GETs serve as the route (it was a 404 that named no Allow).
    for (const path of ["/atropos/batch", "/atropos/reset_data", "/atropos/status-env", "/agent/commands"].flatMap((p) => [p, `${p}/`])) {
      const res = await head(path);
      expect([res.status, res.headers.get("allow"), await res.text()], path).toEqual([405, "GET", ""]);
    }
    expect((await atropos("GET", "/batch")).json).toMatchObject({ batch: [{ tokens: [[7, 0], [7, 1]] }] });
    expect((await atropos("GET", "/info")).json).toEqual({ batch_size: 2, max_token_len: 2048 });
    expect((await e.as("trainer").pollCommands()).commands.map((c) => c.body.kind)).toEqual(["start"]);
    // A GET that changes nothing still answers HEAD.
    expect((await head("/atropos/status")).status).toBe(200);
  });

  it("checks the caller of such a HEAD first, as on every path under an engine: 401 without a token or with another engine's, 404 for no engine", async () => {
    const e = await createEngine();
    const other = await createEngine();
    const head = (path: string, token?: string) => workerFetch(`${ORIGIN}${path}`, { method: "HEAD", headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });
    expect((await head(`/e/${e.name}/agent/commands`)).status).toBe(401);
    expect((await head(`/e/${e.name}/atropos/batch`)).status).toBe(401);
    expect((await head(`/e/${e.name}/atropos/reset_data`, other.tokens.trainer)).status).toBe(401);
    expect((await head(`/e/${e.name}/t/${other.tokens.trainer}/agent/commands`)).status).toBe(401);
    expect((await head(`/e/no-such-engine-${e.name}/agent/commands`, e.tokens.trainer)).status).toBe(404);
    // A token of the engine, whatever its role, hears the route's 405: the HEAD changes nothing.
    const viewer = await head(`/e/${e.name}/atropos/batch`, e.tokens.viewer);
    expect([viewer.status, viewer.headers.get("allow")]).toEqual([405, "GET"]);
  });

  it("does not repeat a token from the URL in a 404's detail (AgentJet logs detail)", async () => {
    const e = await createEngine();
    for (const [method, path] of [["POST", "/claim_episodes"], ["GET", "/claim_episode/"], ["POST", "/atropos/nope"], ["PUT", "/claim_episode"]] as const) {
      const res = await raw(`/e/${e.name}/t/${e.tokens.client}${path}`, { method, ...(method === "GET" ? {} : { body: "{}" }) });
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.text, `${method} ${path}`).not.toContain(e.tokens.client);
      expect(res.json, `${method} ${path}`).toMatchObject({ error: "not_found", detail: expect.stringContaining(`/e/${e.name}${path}`) });
    }
  });

  it("refuses an oversized body on routes that read none (revoking a token, deleting the engine), and changes nothing", async () => {
    const e = await createEngine();
    const res = await raw(`/admin/engines/${e.name}/tokens/${e.tokenIds.viewer}`, { method: "DELETE", token: ADMIN_TOKEN, body: "x".repeat(4 * 1024 * 1024 + 1) });
    expect(res).toMatchObject({ status: 413, json: { error: "payload_too_large" } });
    expect((await e.as("viewer").getEngineStatus()).engine_status).toBe("ENGINE.OFFLINE");
    // Nor deletes the engine.
    const deleting = await raw(`/admin/engines/${e.name}`, { method: "DELETE", token: ADMIN_TOKEN, body: "x".repeat(4 * 1024 * 1024 + 1) });
    expect(deleting).toMatchObject({ status: 413, json: { error: "payload_too_large" } });
    expect((await e.as("viewer").getEngineStatus()).engine_status).toBe("ENGINE.OFFLINE");
  });

  it("refuses an oversized LLM call as an OpenAI error, as the relay's other refusals are; its bound is the relay's, not the API's 4 MiB", async () => {
    for (const path of ["/v1/chat/completions", "/e/some-engine/v1/chat/completions", "/e/some-engine/t/rx_client_x/v1/completions"]) {
      const res = await raw(path, { token: "sk-rx.some-engine.1.ZXAtMA.c2ln", body: JSON.stringify({ model: "m", pad: "x".repeat(DEFAULT_RELAY_MAX_BODY_BYTES) }) });
      expect(res, path).toMatchObject({ status: 413, json: { error: { message: expect.stringContaining(`exceeds ${DEFAULT_RELAY_MAX_BODY_BYTES} bytes`), type: "invalid_request_error", param: null, code: "payload_too_large" } } });
      // A vision call of 5 MiB is within it: refused only for its key.
      const vision = await raw(path, { token: "sk-rx.some-engine.1.ZXAtMA.c2ln", body: JSON.stringify({ model: "m", pad: "x".repeat(5 * 1024 * 1024) }) });
      expect(vision, path).toMatchObject({ status: 401, json: { error: { code: "invalid_api_key" } } });
    }
  });

  it("answers HEAD on the relay's /v1/models as its GET without a body, and a relay path's other methods with the router's 404", async () => {
    const head = await workerFetch(`${ORIGIN}/e/some-engine/v1/models`, { method: "HEAD", headers: { authorization: "Bearer sk-rx.some-engine.1.ZXAtMA.c2ln" } });
    expect(head.status).toBe(401);
    expect(head.headers.get("content-type")).toBe("application/json");
    expect(await head.text()).toBe("");
    expect(await raw("/v1/models", { token: "sk-rx.some-engine.1.ZXAtMA.c2ln" })).toMatchObject({ status: 401, json: { error: { code: "invalid_api_key" } } });
    expect(await raw("/v1/chat/completions", { method: "GET", token: "sk-rx.some-engine.1.ZXAtMA.c2ln" })).toMatchObject({ status: 404, json: { error: "not_found" } });
    // Under an engine, a path no relay route takes is the engine routes' (which look for the engine first).
    expect(await raw("/e/some-engine/v1/models/", { token: "sk-rx.some-engine.1.ZXAtMA.c2ln" })).toMatchObject({ status: 404, json: { error: "unknown_engine" } });
  });

  it("answers unknown routes with a JSON 404", async () => {
    const res = await raw("/nope");
    expect(res).toMatchObject({ status: 404, json: { error: "not_found" } });
  });

  it("keeps no long token a stranger sends in the Worker's memory (it is filled before the engine checks a token)", async () => {
    const e = await createEngine();
    const tokens = Array.from({ length: 50 }, (_, i) => `${i.toString(36)}-${"A".repeat(32 * 1024)}`);
    for (const token of tokens) {
      expect(await raw(`/e/no-such-engine-long-token/get_engine_status`, { token })).toMatchObject({ status: 404 });
      expect(await raw(`/e/${e.name}/get_engine_status`, { token })).toMatchObject({ status: 401, json: { error: "invalid_token" } });
    }
    expect(tokens.filter((t) => cachedTokenHash(t) !== undefined)).toEqual([]);
    // The exchange's own tokens are cached as before.
    expect(await raw(`/e/${e.name}/get_engine_status`, { token: e.tokens.viewer })).toMatchObject({ status: 200 });
    expect(cachedTokenHash(e.tokens.viewer)).toBeDefined();
  });
});

describe("a failure of the exchange itself", () => {
  afterEach(() => vi.restoreAllMocks());

  it("answers a 500 with an error id and nothing of the failure, and logs the failure under that id", async () => {
    const e = await createEngine();
    // Spied on, not replaced: the log still gets every line, and the test reads them too.
    const logged = vi.spyOn(console, "error").mock.calls;
    // A real D1 failure: the table of engines is gone while these requests run.
    await env.DB.exec("ALTER TABLE engines RENAME TO engines_away");
    try {
      // Through the router (the admin API) and through the engine API served before it (an engine whose route is not cached yet).
      const listed = await raw("/admin/engines", { token: ADMIN_TOKEN });
      const status = await raw(`/e/${e.name}-uncached/get_engine_status`, { token: e.tokens.viewer });
      for (const res of [listed, status]) {
        expect(res).toMatchObject({ status: 500, json: { error: "internal_error", detail: expect.stringMatching(/error id [0-9a-f-]{36}/) } });
        expect(res.text).not.toMatch(/engines|SQL|D1_ERROR|no such table/i);
        const id = /error id ([0-9a-f-]{36})/.exec(String(res.json?.["detail"]))?.[1];
        const line = logged.find((args) => String(args[0]).includes(`${id}`));
        expect(line, `a log line with ${id}`).toBeDefined();
        // The log has what the answer leaves out: the failed query on D1's table.
        expect(String(line?.[1])).toMatch(/from "engines"/);
      }
    } finally {
      await env.DB.exec("ALTER TABLE engines_away RENAME TO engines");
    }
    expect((await raw("/admin/engines", { token: ADMIN_TOKEN })).status).toBe(200);
  });
});
