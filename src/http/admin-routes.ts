/**
 * The deployment admin's API: engines and their tokens. D1 holds engines and token hashes;
 * each engine's Durable Object holds the hashes it checks on every request, so D1 is written
 * first and the engine is told second (a token the engine knows is always on record).
 */
import { Hono } from "hono";
import { and, eq } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import type { Env } from "../env";
import { engines, tokens } from "../db/schema";
import { ROLES, CreateEngineRequest, IssueTokenRequest, type CreateEngineResponse, type IssuedToken, type Role } from "../protocol/admin";
import { constantTimeEqual, hashToken, newTokenId, newTokenSecret } from "../auth/tokens";
import { errorResponse } from "./errors";
import { readJson } from "./validate";
import { engineStub, placedEngineStub } from "./engine-stub";

export const adminRoutes = new Hono<{ Bindings: Env }>();

adminRoutes.use("*", async (c, next) => {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(c.req.header("authorization") ?? "");
  if (!m?.[1]) return errorResponse(401, "missing_token", "Admin routes need `Authorization: Bearer <ADMIN_TOKEN>`.");
  if (!c.env.ADMIN_TOKEN || !constantTimeEqual(m[1], c.env.ADMIN_TOKEN)) {
    return errorResponse(403, "forbidden", "This token is not the deployment's admin token.");
  }
  await next();
});

async function mint(engine: string, role: Role, label: string, now: number) {
  const token = newTokenSecret(role);
  const hash = await hashToken(token);
  return { token, row: { id: newTokenId(), engine, role, tokenHash: hash, label, createdAt: now, revokedAt: null } };
}

adminRoutes.post("/engines", async (c) => {
  const req = await readJson(c, CreateEngineRequest);
  if (!req.ok) return req.response;
  const { name, location_hint: locationHint, jurisdiction } = req.value;
  const db = drizzle(c.env.DB);
  if ((await db.select().from(engines).where(eq(engines.name, name)).limit(1)).length > 0) {
    return errorResponse(409, "engine_exists", `Engine '${name}' already exists.`);
  }
  const now = Date.now();
  const minted = await Promise.all(ROLES.map((role) => mint(name, role, `${role} (created with the engine)`, now)));
  try {
    await db.batch([db.insert(engines).values({ name, createdAt: now, locationHint, jurisdiction }), db.insert(tokens).values(minted.map((m) => m.row))]);
  } catch {
    return errorResponse(409, "engine_exists", `Engine '${name}' already exists.`);
  }
  const placement = { name, jurisdiction, locationHint };
  await placedEngineStub(c.env, placement).provision(name, minted.map((m) => ({ id: m.row.id, hash: m.row.tokenHash, role: m.row.role })));
  const body: CreateEngineResponse = {
    engine: name,
    location_hint: locationHint,
    jurisdiction,
    tokens: Object.fromEntries(minted.map((m) => [m.row.role, m.token])) as Record<Role, string>,
    token_ids: Object.fromEntries(minted.map((m) => [m.row.role, m.row.id])) as Record<Role, string>,
  };
  return c.json(body, 201);
});

adminRoutes.get("/engines", async (c) => {
  const rows = await drizzle(c.env.DB).select().from(engines).orderBy(engines.name);
  return c.json({
    engines: rows.map((r) => ({ name: r.name, created_at: r.createdAt / 1000, location_hint: r.locationHint, jurisdiction: r.jurisdiction })),
  });
});

async function engineRow(env: Env, name: string) {
  return (await drizzle(env.DB).select().from(engines).where(eq(engines.name, name)).limit(1))[0] ?? null;
}

adminRoutes.get("/engines/:name/tokens", async (c) => {
  const name = c.req.param("name");
  if ((await engineRow(c.env, name)) === null) return errorResponse(404, "unknown_engine", `No such engine '${name}'.`);
  const rows = await drizzle(c.env.DB).select().from(tokens).where(eq(tokens.engine, name)).orderBy(tokens.createdAt);
  return c.json({
    tokens: rows.map((r) => ({ id: r.id, role: r.role, label: r.label, created_at: r.createdAt / 1000, revoked_at: r.revokedAt === null ? null : r.revokedAt / 1000 })),
  });
});

adminRoutes.post("/engines/:name/tokens", async (c) => {
  const name = c.req.param("name");
  const req = await readJson(c, IssueTokenRequest);
  if (!req.ok) return req.response;
  const engine = await engineRow(c.env, name);
  if (engine === null) return errorResponse(404, "unknown_engine", `No such engine '${name}'.`);
  const m = await mint(name, req.value.role, req.value.label, Date.now());
  await drizzle(c.env.DB).insert(tokens).values(m.row);
  await placedEngineStub(c.env, engine).provision(name, [{ id: m.row.id, hash: m.row.tokenHash, role: m.row.role }]);
  const body: IssuedToken = { id: m.row.id, role: m.row.role, token: m.token };
  return c.json(body, 201);
});

adminRoutes.delete("/engines/:name/tokens/:id", async (c) => {
  const { name, id } = c.req.param();
  const db = drizzle(c.env.DB);
  const row = (await db.select().from(tokens).where(and(eq(tokens.engine, name), eq(tokens.id, id))).limit(1))[0];
  if (!row) return errorResponse(404, "unknown_token", `Engine '${name}' has no token '${id}'.`);
  if (row.revokedAt === null) await db.update(tokens).set({ revokedAt: Date.now() }).where(eq(tokens.id, id));
  // Told every time, so a revocation that failed halfway is completed by repeating it.
  await (await engineStub(c.env, name))?.revokeToken(row.tokenHash);
  return c.json({ success: true });
});
