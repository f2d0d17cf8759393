/**
 * /openapi.json from the live local Worker: valid OpenAPI 3.1 (checked by a real validator),
 * complete (every ENGINE_API and ATROPOS_API route in both path forms, every admin route), with
 * the roles, the bearer security and the error body of each 4xx; and true (the admin routes and
 * Atropos's answer as the document says, and every documented engine path exists).
 *
 * No browser here, so this file is type-checked without the DOM (tsconfig.contract.json): it
 * imports the route table, which pulls in the engine's Worker-typed modules.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Validator } from "@seriousme/openapi-schema-validator";
import { z } from "zod";
import { ENGINE_API } from "../src/http/engine-api";
import { mayRun } from "../src/auth/roles";
import { ROLES } from "../src/protocol/admin";
import { ADMIN_API } from "../src/openapi/admin-api";
import { ATROPOS_API } from "../src/atropos/routes";
import { atroposOp } from "../src/engine/atropos-hub";
import { promiseOf, type Doc as ReadDoc } from "../test/fuzz/document";
import { ADMIN_TOKEN, startExchange, type TestExchange } from "./support/exchange";

type Operation = {
  operationId: string;
  security: Record<string, string[]>[];
  "x-roles": string[];
  "x-changes-state"?: true;
  responses: Record<string, { $ref?: string; content?: Record<string, { schema: unknown }> }>;
  requestBody?: unknown;
};
type Doc = {
  openapi: string;
  paths: Record<string, Record<string, Operation>>;
  components: { responses: Record<string, { content: Record<string, { schema: unknown }> }>; schemas: Record<string, Record<string, unknown>> };
};

let ex: TestExchange;
let doc: Doc;

beforeAll(async () => {
  ex = await startExchange();
  const res = await fetch(`${ex.url}/openapi.json`);
  expect(res.status).toBe(200);
  doc = (await res.json()) as Doc;
});

afterAll(async () => {
  await ex?.stop();
});

describe("/openapi.json", () => {
  it("is a valid OpenAPI 3.1 document", async () => {
    const result = await new Validator().validate(doc);
    expect(result.errors).toBeUndefined();
    expect(result.valid).toBe(true);
    expect(doc.openapi).toBe("3.1.0");
    // The validator is not a rubber stamp: a response that is not an object is refused.
    const broken = { ...doc, paths: { "/x": { get: { responses: { "200": 5 } } } } };
    expect((await new Validator().validate(broken)).valid).toBe(false);
  });

  it("describes every engine route in both path forms, with its roles, security and errors", () => {
    for (const spec of ENGINE_API) {
      const roles = [...ROLES.filter((r) => mayRun(r, spec.op)), "admin"];
      for (const [prefix, security] of [
        ["/e/{engine}", [{ engineToken: [] }]],
        ["/e/{engine}/t/{token}", []],
      ] as const) {
        const op = doc.paths[prefix + spec.path]?.[spec.method];
        expect(op, `${spec.method} ${prefix}${spec.path}`).toBeDefined();
        expect(op?.["x-roles"]).toEqual(roles);
        expect(op?.security).toEqual(security);
        // GETs that change state say so (the agent's poll leases what it returns).
        expect(op?.["x-changes-state"]).toBe(spec.changesState);
        expect(Object.keys(op?.responses ?? {})).toEqual(expect.arrayContaining(["200", "401", "403", "404"]));
        if (spec.input.from === "body") expect(Object.keys(op?.responses ?? {})).toEqual(expect.arrayContaining(["400", "413", "422"]));
        if (spec.input.from === "body") expect(op?.requestBody).toBeDefined();
      }
    }
    const ids = Object.values(doc.paths).flatMap((item) => Object.values(item).map((op) => op.operationId));
    expect(new Set(ids).size).toBe(ids.length);
    // Every request under an engine with a role's token counts against its limit: the training
    // runs' routes and MCP too, not only ENGINE_API's.
    for (const [path, item] of Object.entries(doc.paths)) {
      if (!path.startsWith("/e/{engine}/") || path.includes("/v1/")) continue;
      for (const [method, op] of Object.entries(item)) expect(Object.keys(op.responses), `${method} ${path}`).toContain("429");
    }
  });

  it("documents a trajectory's ETag, If-None-Match and its 304, and only on the trajectory routes", () => {
    type Conditional = { parameters?: { name: string; in: string }[]; responses: Record<string, { headers?: Record<string, unknown>; content?: unknown }> };
    const conditional: string[] = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item as Record<string, Conditional>)) {
        if (op.responses["304"] === undefined) continue;
        conditional.push(`${method} ${path}`);
        expect(op.parameters?.find((p) => p.name === "If-None-Match")?.in, path).toBe("header");
        expect(Object.keys(op.responses["200"]?.headers ?? {}), path).toEqual(["ETag", "Cache-Control"]);
        expect(Object.keys(op.responses["304"]?.headers ?? {}), path).toEqual(["ETag", "Cache-Control"]);
        expect(op.responses["304"]?.content, path).toBeUndefined();
      }
    }
    expect(conditional.sort()).toEqual(
      ["/e/{engine}", "/e/{engine}/t/{token}"].flatMap((prefix) => [`get ${prefix}/trajectories/{episode_uuid}`, `get ${prefix}/trajectories/{episode_uuid}/{fence}`]).sort(),
    );
  });

  it("gives every 4xx the {error, detail} body", () => {
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const op of Object.values(item)) {
        for (const [status, r] of Object.entries(op.responses)) {
          if (!status.startsWith("4")) continue;
          // MCP answers a message it cannot read with JSON-RPC's own error object, as the protocol has it.
          if (path.endsWith("/mcp") && status === "400") continue;
          // The relay answers as OpenAI does (the test below).
          if (path.includes("/v1/")) continue;
          // Atropos's clients read FastAPI's 422 and its middleware's plain-text 400 (the test below).
          if (path.includes("/atropos") && (status === "400" || status === "422")) continue;
          expect(r.$ref).toBe(`#/components/responses/Error${status}`);
          expect(doc.components.responses[`Error${status}`]?.content["application/json"]?.schema).toEqual({ $ref: "#/components/schemas/ErrorResponse" });
        }
      }
    }
  });

  it("marks every 503 a route answers by design with its codes (x-refusal-codes), with Retry-After where it is sent", () => {
    type Refusing = { "x-refusal-codes"?: string[]; headers?: Record<string, unknown> };
    const refusal = (path: string, method = "post"): Refusing | undefined =>
      (doc.paths[path]?.[method]?.responses["503"] as Refusing | undefined) ?? undefined;
    const expected: Record<string, string[]> = {
      "/register_episode": ["storage_full"],
      "/batch/register_episode": ["storage_full"],
      "/end_episode": ["storage_full"],
      "/abort_episode": ["storage_full"],
      "/steps": ["paced", "buffer_full", "storage_full"],
      "/atropos/scored_data": ["queue_full", "storage_full"],
      "/atropos/scored_data_list": ["queue_full", "storage_full"],
      "/atropos/register-env": ["storage_full"],
    };
    for (const prefix of ["/e/{engine}", "/e/{engine}/t/{token}"]) {
      for (const [path, codes] of Object.entries(expected)) {
        const r = refusal(prefix + path);
        expect(r?.["x-refusal-codes"], prefix + path).toEqual(codes);
        expect(r?.headers?.["Retry-After"], prefix + path).toBeDefined();
      }
    }
    // Claims, pulls and acks go on while the store is full: no refusal by design there.
    for (const path of ["/claim_episode", "/get_rollout_data", "/agent/ack"]) expect(refusal(`/e/{engine}${path}`), path).toBeUndefined();
    expect(refusal("/e/{engine}/atropos/batch", "get")).toBeUndefined();
    // The ledger's and the admin's, which docs/operations.md lists among the refusals to retry,
    // were documented as bare 503s: a client reading the codes from the document did not learn
    // that these are to be sent again.
    for (const prefix of ["/e/{engine}", "/e/{engine}/t/{token}"]) {
      expect(refusal(`${prefix}/agent/calls`)?.["x-refusal-codes"]).toEqual(["ledger_unavailable"]);
      expect(refusal(`${prefix}/agent/media/{sha256}`, "put")?.["x-refusal-codes"]).toEqual(["ledger_unavailable"]);
    }
    expect(refusal("/admin/engines/{name}", "delete")?.["x-refusal-codes"]).toEqual(["history_not_written", "delete_in_progress"]);
    // The relay's, in its three forms: the engine is not rolling or syncing, or has no gateway.
    for (const prefix of ["", "/e/{engine}", "/e/{engine}/t/{token}"]) {
      for (const [endpoint, method] of [
        ["/v1/chat/completions", "post"],
        ["/v1/models", "get"],
      ] as const) {
        expect(refusal(prefix + endpoint, method)?.["x-refusal-codes"], prefix + endpoint).toEqual(["engine_not_rolling", "sync_hold_expired", "no_gateway", "engine_unreachable", "admission_unsettled"]);
      }
    }
  });

  it("describes refusals with their hints: a runs refusal matches the documented error body", async () => {
    const { tokens } = await ex.admin.createEngine("refusing");
    const res = await fetch(`${ex.url}/e/refusing/runs/run_0000`, { headers: { authorization: `Bearer ${tokens.viewer}` } });
    expect(res.status).toBe(404);
    const body: unknown = await res.json();
    expect(body).toMatchObject({ error: "unknown_run", run_id: "run_0000" });
    expect(doc.paths["/e/{engine}/runs/{run_id}"]?.["get"]?.responses["404"]?.$ref).toBe("#/components/responses/Error404");
    const documented = z.fromJSONSchema(doc.components.schemas["ErrorResponse"] as Parameters<typeof z.fromJSONSchema>[0]);
    expect(documented.safeParse(body).error).toBeUndefined();
    expect(documented.safeParse({ error: "unknown_run" }).success).toBe(false);
  });

  it("describes the MCP endpoint as it answers: a batch, a notification, a parse error, bad messages, an oversized body", async () => {
    const { tokens } = await ex.admin.createEngine("mcp-documented");
    const op = (doc as unknown as ReadDoc).paths["/e/{engine}/mcp"]?.["post"];
    expect(op).toBeDefined();
    const cases: [string, number][] = [
      [JSON.stringify([{ jsonrpc: "2.0", id: 1, method: "ping" }, { jsonrpc: "2.0", id: 2, method: "tools/list" }]), 200],
      [JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }), 202],
      ["{", 400],
      [JSON.stringify({ jsonrpc: "1.0", id: 1 }), 400],
      [JSON.stringify([{ jsonrpc: "1.0", id: 1 }, { jsonrpc: "2.0" }]), 400],
    ];
    // runs-mcp.test.ts sends one over the limit (here, over a socket, the early 413 can race the upload).
    expect(Object.keys(op?.responses ?? {})).toContain("413");
    for (const [body, status] of cases) {
      const res = await fetch(`${ex.url}/e/mcp-documented/mcp`, { method: "POST", headers: { authorization: `Bearer ${tokens.viewer}`, "content-type": "application/json" }, body });
      expect(res.status, body.slice(0, 80)).toBe(status);
      const promised = promiseOf(doc as unknown as ReadDoc, op!, status);
      expect(promised, `the document lists ${status} for MCP`).toBeDefined();
      const text = await res.text();
      if (promised?.kind === "json") expect(promised.schema.safeParse(JSON.parse(text)).error, `${status}: ${text.slice(0, 200)}`).toBeUndefined();
      else expect(text).toBe("");
    }
  });

  it("describes Atropos's API in both path forms, and as it answers: FastAPI's 422, plain texts, Atropos's 500", async () => {
    for (const spec of ATROPOS_API) {
      const roles = [...ROLES.filter((r) => mayRun(r, atroposOp(spec.route))), "admin"];
      for (const prefix of ["/e/{engine}", "/e/{engine}/t/{token}"]) {
        const op = doc.paths[`${prefix}/atropos${spec.path}`]?.[spec.method.toLowerCase()];
        expect(op, `${spec.method} ${prefix}/atropos${spec.path}`).toBeDefined();
        expect(op?.["x-roles"]).toEqual(roles);
        expect(op?.["x-changes-state"]).toBe(spec.changesState);
        if (spec.body !== undefined) expect(Object.keys(op?.responses ?? {})).toEqual(expect.arrayContaining(["400", "413", "422"]));
      }
    }
    const { tokens } = await ex.admin.createEngine("atropos-documented");
    const base = `${ex.url}/e/atropos-documented/t/${tokens.trainer}/atropos`;
    const json = { "content-type": "application/json" };
    const cases: { path: string; method: string; init?: RequestInit; status: number; text?: string }[] = [
      { path: "/register", method: "post", init: { headers: json, body: JSON.stringify({ wandb_group: "g" }) }, status: 422 },
      { path: "/register", method: "post", init: { headers: json, body: "{" }, status: 422 },
      { path: "/register", method: "post", init: { headers: { ...json, "content-encoding": "gzip" }, body: "not gzip" }, status: 400, text: "Invalid gzip payload" },
      {
        path: "/register",
        method: "post",
        init: { headers: json, body: JSON.stringify({ wandb_group: "g", wandb_project: "p", batch_size: 2, max_token_len: 64, checkpoint_dir: "/c", save_checkpoint_interval: 1, starting_step: 0, num_steps: 9 }) },
        status: 200,
      },
      { path: "/status-env?env_id=3", method: "get", status: 500, text: "Internal Server Error" },
      { path: "/reset_data", method: "get", status: 200, text: "Reset successful" },
      { path: "/batch", method: "get", status: 500, text: "Internal Server Error" },
      { path: "/status", method: "get", status: 200 },
    ];
    for (const c of cases) {
      const res = await fetch(base + c.path, { method: c.method.toUpperCase(), ...c.init });
      const where = `${c.method} ${c.path} (${JSON.stringify(c.init?.body ?? "")})`;
      expect(res.status, where).toBe(c.status);
      const op = (doc as unknown as ReadDoc).paths[`/e/{engine}/t/{token}/atropos${c.path.replace(/\?.*/, "")}`]?.[c.method];
      const promised = promiseOf(doc as unknown as ReadDoc, op!, c.status);
      const text = await res.text();
      if (c.text !== undefined) {
        expect(promised?.kind, where).toBe("text");
        expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
        expect(text).toBe(c.text);
      }
      if (promised?.kind === "json") expect(promised.schema.safeParse(JSON.parse(text)).error, `${where}: ${text.slice(0, 200)}`).toBeUndefined();
      else if (promised?.kind === "text") expect(promised.schema.safeParse(text).error, where).toBeUndefined();
      else expect.fail(`${where}: the document lists no answer for ${c.status}`);
    }
  });

  it("describes the LLM relay in its three forms, with OpenAI's error body for its refusals", async () => {
    await ex.admin.createEngine("relay-documented");
    for (const prefix of ["", "/e/{engine}", "/e/{engine}/t/{token}"]) {
      for (const [endpoint, method] of [
        ["/v1/chat/completions", "post"],
        ["/v1/completions", "post"],
        ["/v1/models", "get"],
      ] as const) {
        const op = (doc as unknown as ReadDoc).paths[prefix + endpoint]?.[method];
        expect(op, `${method} ${prefix}${endpoint}`).toBeDefined();
        expect(op?.responses["4XX"]).toBeDefined();
        // Without a key: the documented 401, in OpenAI's form.
        const url = ex.url + prefix.replace("{engine}", "relay-documented").replace("{token}", "not-a-token") + endpoint;
        const res = await fetch(url, { method: method.toUpperCase(), ...(method === "post" ? { headers: { "content-type": "application/json" }, body: '{"model":"m"}' } : {}) });
        expect(res.status, url).toBe(401);
        const promised = promiseOf(doc as unknown as ReadDoc, op!, 401);
        expect(promised?.kind).toBe("json");
        if (promised?.kind === "json") expect(promised.schema.safeParse(await res.json()).error, url).toBeUndefined();
      }
      // The relay's own bound (RELAY_MAX_BODY_BYTES, 16 MiB by default), which a vision agent's
      // calls need: the document said 4 MiB, the exchange's API's, so clients split calls it takes.
      for (const endpoint of ["/v1/chat/completions", "/v1/completions"]) {
        const too = (doc as unknown as ReadDoc).paths[prefix + endpoint]?.post?.responses["413"] as { description?: string } | undefined;
        expect(too?.description, prefix + endpoint).toContain("RELAY_MAX_BODY_BYTES`, 16 MiB");
      }
    }
    // And it takes such a body: a 5 MiB call is refused for its key, not its size.
    const big = JSON.stringify({ model: "m", messages: [{ role: "user", content: "x".repeat(5 * 2 ** 20) }] });
    const res = await fetch(`${ex.url}/v1/chat/completions`, { method: "POST", headers: { authorization: "Bearer not-a-claim-key", "content-type": "application/json" }, body: big });
    expect(res.status).toBe(401);
  });

  it("describes the admin routes as they answer", async () => {
    const name = "documented";
    const bodies: Record<string, unknown> = { admin_create_engine: { name }, admin_issue_token: { role: "viewer", label: "doc test" } };
    // The engine is deleted keeping its history, so that the archive routes have an archive to list and delete.
    const queries: Record<string, string> = { admin_delete_engine: "?keep_history=true" };
    let tokenId = "";
    let archive = "";
    for (const spec of ADMIN_API) {
      const op = doc.paths[spec.path]?.[spec.method];
      expect(op?.security).toEqual([{ adminToken: [] }]);
      expect(Object.keys(op?.responses ?? {})).toContain(String(spec.successStatus));
      const named = spec.path.startsWith("/admin/archives/") ? archive : name;
      const url = ex.url + spec.path.replace("{name}", encodeURIComponent(named)).replace("{id}", tokenId) + (queries[spec.operationId] ?? "");
      const body = bodies[spec.operationId];
      const res = await fetch(url, {
        method: spec.method.toUpperCase(),
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(body ? { "content-type": "application/json" } : {}) },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
      expect(res.status, spec.operationId).toBe(spec.successStatus);
      const json: unknown = await res.json();
      expect(() => spec.response.parse(json), spec.operationId).not.toThrow();
      if (spec.operationId === "admin_issue_token") tokenId = (json as { id: string }).id;
      if (spec.operationId === "admin_delete_engine") archive = (json as { history_kept_as: string }).history_kept_as;
      if (spec.operationId === "admin_list_archives") expect((json as { archives: { name: string }[] }).archives.map((a) => a.name)).toContain(archive);
      // Without the admin token: the documented 401, with the documented body.
      const anon = await fetch(url, { method: spec.method.toUpperCase() });
      expect(anon.status).toBe(401);
      expect(Object.keys((await anon.json()) as object).sort()).toEqual(["detail", "error"]);
    }
    // A DELETE takes no body, but one sent past the size limit is refused like any other
    // (bad-input.test.ts sends one: over a socket, a refusal before the body is read can race it):
    // every operation whose method may carry a body lists the 413 (the relay's as OpenAI's 4XX).
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        if (!["post", "put", "patch", "delete"].includes(method)) continue;
        expect(Object.keys(op.responses).some((s) => s === "413" || s === "4XX"), `${method} ${path}`).toBe(true);
      }
    }
  });

  it("lists only routes that exist: each documented engine path answers 401 without a token, not 404", async () => {
    for (const [path, item] of Object.entries(doc.paths)) {
      if (!path.startsWith("/e/{engine}/") || path.includes("{token}")) continue;
      for (const method of Object.keys(item)) {
        const res = await fetch(ex.url + path.replace("{engine}", "documented"), { method: method.toUpperCase() });
        expect(res.status, `${method} ${path}`).toBe(401);
      }
    }
  });
});
