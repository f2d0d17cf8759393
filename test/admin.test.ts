import { env } from "cloudflare:workers";
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { EngineClient } from "../src/client";
import type { Env } from "../src/env";
import worker from "../src/index";
import { admin, createEngine, raw, rollingWith, uniqueName, ADMIN_TOKEN, ORIGIN, workerFetch } from "./support/harness";

describe("admin: engines and tokens", () => {
  it("creates an engine with one token per role, and lists it", async () => {
    const e = await createEngine("adm");
    expect(Object.keys(e.tokens).sort()).toEqual(["client", "operator", "trainer", "viewer"]);
    for (const [role, token] of Object.entries(e.tokens)) expect(token).toMatch(new RegExp(`^rx_${role}_`));
    const list = await admin.listEngines();
    expect(list.engines.map((x) => x.name)).toContain(e.name);
    expect((await e.as("viewer").getEngineStatus()).engine_status).toBe("ENGINE.OFFLINE");
  });

  it("stores only token hashes in D1", async () => {
    const e = await createEngine("hash");
    const rows = await env.DB.prepare("SELECT * FROM tokens WHERE engine = ?").bind(e.name).all();
    expect(rows.results).toHaveLength(4);
    const dump = JSON.stringify(rows.results);
    for (const token of Object.values(e.tokens)) expect(dump).not.toContain(token);
    for (const r of rows.results) expect(r["token_hash"]).toMatch(/^[0-9a-f]{64}$/);
  });

  it("lists tokens without secrets, issues new ones and revokes them", async () => {
    const e = await createEngine("tok");
    const issued = await admin.issueToken(e.name, "client", "laptop");
    const listed = await admin.listTokens(e.name);
    expect(listed.tokens).toHaveLength(5);
    expect(JSON.stringify(listed)).not.toContain(issued.token);
    expect(listed.tokens.find((t) => t.id === issued.id)).toMatchObject({ role: "client", label: "laptop", revoked_at: null });

    const asNew = raw(`/e/${e.name}/get_engine_status`, { token: issued.token });
    expect((await asNew).status).toBe(200);
    await admin.revokeToken(e.name, issued.id);
    const after = await raw(`/e/${e.name}/get_engine_status`, { token: issued.token });
    expect(after.status).toBe(401);
    expect(after.json?.["detail"]).toContain("unknown or revoked");
    const relisted = await admin.listTokens(e.name);
    expect(relisted.tokens.find((t) => t.id === issued.id)?.revoked_at).toEqual(expect.any(Number));
    // Revoking again is harmless; other tokens still work.
    await admin.revokeToken(e.name, issued.id);
    expect((await raw(`/e/${e.name}/get_engine_status`, { token: e.tokens.viewer })).status).toBe(200);
  });

  it("moves the engine's gateway secret on when a token that may read it (a trainer's) is revoked, and only then", async () => {
    const e = await createEngine("gws");
    const spare = await admin.issueToken(e.name, "trainer", "gpu host, again");
    const trainer = new EngineClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: spare.token, fetch: workerFetch });
    const secret = async () => (await trainer.gatewaySecret()).secret;
    const first = await secret();
    expect(await e.as("trainer").gatewaySecret()).toEqual({ secret: first });
    // Tokens that may not read it: the secret stays, and the agent's gateway needs no new one.
    for (const role of ["viewer", "client", "operator"] as const) await admin.revokeToken(e.name, e.tokenIds[role]);
    expect(await secret()).toBe(first);
    // The trainer token the agent used leaked: what it fetched is worth nothing from now on.
    await admin.revokeToken(e.name, e.tokenIds.trainer);
    const second = await secret();
    expect(second).not.toBe(first);
    // Revoking it again, or an unknown token (404, nothing changed), moves nothing.
    await admin.revokeToken(e.name, e.tokenIds.trainer);
    expect((await raw(`/admin/engines/${e.name}/tokens/tok_nope`, { method: "DELETE", token: ADMIN_TOKEN })).status).toBe(404);
    expect(await secret()).toBe(second);
    await admin.revokeToken(e.name, spare.id);
    await expect(trainer.gatewaySecret()).rejects.toMatchObject({ status: 401 });
    expect((await e.as("admin").gatewaySecret()).secret).not.toBe(second);
  });

  it("refuses a duplicate engine, bad names, unknown engines and tokens", async () => {
    const e = await createEngine("dup");
    await expect(admin.createEngine(e.name)).rejects.toMatchObject({ status: 409, code: "engine_exists" });
    // A create repeated because its answer (the only copy of the tokens) was lost says how to get working ones.
    const again = await raw("/admin/engines", { token: ADMIN_TOKEN, body: JSON.stringify({ name: e.name }) });
    expect(again.json?.["detail"]).toContain(`issue new ones with POST /admin/engines/${e.name}/tokens and revoke those labelled "created with the engine"`);
    const bad = await raw("/admin/engines", { token: ADMIN_TOKEN, body: JSON.stringify({ name: "Bad Name!" }) });
    expect(bad.status).toBe(422);
    expect(bad.json?.["detail"]).toContain("name");
    await expect(admin.listTokens("no-such-engine")).rejects.toMatchObject({ status: 404 });
    await expect(admin.issueToken("no-such-engine", "client")).rejects.toMatchObject({ status: 404 });
    await expect(admin.revokeToken(e.name, "tok_nope")).rejects.toMatchObject({ status: 404 });
    const badRole = await raw(`/admin/engines/${e.name}/tokens`, { token: ADMIN_TOKEN, body: JSON.stringify({ role: "god" }) });
    expect(badRole.status).toBe(422);
    expect(badRole.json?.["detail"]).toContain("unknown role");
    expect((await admin.listTokens(e.name)).tokens).toHaveLength(4);
  });

  it("needs the admin token", async () => {
    const name = uniqueName("noauth");
    expect((await raw("/admin/engines", { body: JSON.stringify({ name }) })).status).toBe(401);
    const e = await createEngine("notadmin");
    const wrong = await raw("/admin/engines", { token: e.tokens.operator, body: JSON.stringify({ name }) });
    expect(wrong.status).toBe(403);
    expect((await admin.listEngines()).engines.map((x) => x.name)).not.toContain(name);
  });

  it("says a deployment without ADMIN_TOKEN lacks the secret, not that the caller's token is wrong, and still serves engine tokens", async () => {
    const e = await createEngine("noadmin");
    // A secret never put is undefined in the Worker's env; one put empty is "".
    for (const unset of [undefined as unknown as string, ""]) {
      const fetchUnset = async (path: string, init: RequestInit) => {
        const ctx = createExecutionContext();
        const res = await worker.fetch(new Request(`${ORIGIN}${path}`, init) as Request<unknown, IncomingRequestCfProperties>, { ...(env as unknown as Env), ADMIN_TOKEN: unset }, ctx);
        const body = (await res.json()) as Record<string, unknown>;
        await waitOnExecutionContext(ctx);
        return { status: res.status, body };
      };
      const name = uniqueName("noadmin");
      const refused = await fetchUnset("/admin/engines", { method: "POST", headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" }, body: JSON.stringify({ name }) });
      expect(refused).toEqual({ status: 500, body: { error: "misconfigured", detail: expect.stringMatching(/^ADMIN_TOKEN is not configured/) } });
      expect(refused.body["detail"]).toContain("wrangler secret put ADMIN_TOKEN");
      expect((await admin.listEngines()).engines.map((x) => x.name)).not.toContain(name);
      expect((await fetchUnset(`/e/${e.name}/get_engine_status`, { headers: { authorization: `Bearer ${e.tokens.viewer}` } })).status).toBe(200);
    }
  });

  it("places an engine: a location hint and a jurisdiction, stored, shown, and the engine reachable", async () => {
    const e = await createEngine("placed", { location_hint: "weur", jurisdiction: "eu" });
    const row = await env.DB.prepare("SELECT location_hint, jurisdiction FROM engines WHERE name = ?").bind(e.name).first();
    expect(row).toEqual({ location_hint: "weur", jurisdiction: "eu" });
    expect((await admin.listEngines()).engines.find((x) => x.name === e.name)).toMatchObject({ location_hint: "weur", jurisdiction: "eu", deleting_since: null });
    // workerd has no jurisdictions (it throws for every one): locally the engine lives unconfined, and works.
    await rollingWith(e, 1);
    expect(await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 })).toMatchObject({ success: true });
    expect((await e.viaUrl("viewer").getEngineStatus()).engine_status).toBe("ENGINE.ROLLING");
    const hintOnly = await admin.createEngine(uniqueName("hinted"), { location_hint: "apac" });
    expect(hintOnly).toMatchObject({ location_hint: "apac", jurisdiction: null });
    const plain = await admin.createEngine(uniqueName("plain"));
    expect(plain).toMatchObject({ location_hint: null, jurisdiction: null });
  });

  it("refuses a location hint or jurisdiction Cloudflare does not document, creating nothing", async () => {
    for (const [field, value, says] of [
      ["location_hint", "mars", "unknown location hint"],
      ["location_hint", "apac-ne", "unknown location hint"],
      ["jurisdiction", "uk", "unknown jurisdiction"],
      ["jurisdiction", 7, "unknown jurisdiction"],
    ] as const) {
      const name = uniqueName("badplace");
      const res = await raw("/admin/engines", { token: ADMIN_TOKEN, body: JSON.stringify({ name, [field]: value }) });
      expect(res.status, `${field}=${value}`).toBe(422);
      expect(res.json).toMatchObject({ error: "invalid_request", detail: expect.stringContaining(says) });
      expect(await env.DB.prepare("SELECT name FROM engines WHERE name = ?").bind(name).first()).toBeNull();
    }
  });

  it("refuses a field it does not know, with a 422 naming it, creating no engine and minting no token", async () => {
    // A misspelt jurisdiction dropped silently made an engine outside any jurisdiction (only a
    // delete undoes that); a misspelt label or an expiry the API does not have, a permanent
    // unlabelled token whose secret is shown once.
    const name = uniqueName("juris");
    const create = await raw("/admin/engines", { token: ADMIN_TOKEN, body: JSON.stringify({ name, jurisdicton: "eu" }) });
    expect(create.status).toBe(422);
    expect(create.json).toMatchObject({ error: "invalid_request", detail: expect.stringContaining("jurisdicton") });
    expect(await env.DB.prepare("SELECT name FROM engines WHERE name = ?").bind(name).first()).toBeNull();

    const e = await createEngine("tokbody");
    const tokens = async (): Promise<number> => (await env.DB.prepare("SELECT COUNT(*) AS n FROM tokens WHERE engine = ?").bind(e.name).first<{ n: number }>())!.n;
    const before = await tokens();
    const issue = await raw(`/admin/engines/${e.name}/tokens`, { token: ADMIN_TOKEN, body: JSON.stringify({ role: "client", lable: "laptop", expires_in: 3600 }) });
    expect(issue.status).toBe(422);
    expect(issue.json).toMatchObject({ error: "invalid_request", detail: expect.stringContaining("lable") });
    expect(await tokens()).toBe(before);
  });
});
