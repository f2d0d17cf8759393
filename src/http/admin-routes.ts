/**
 * The deployment admin's API: engines and their tokens. D1 holds engines and token hashes;
 * each engine's Durable Object holds the hashes it checks on every request, so D1 is written
 * first and the engine is told second (a token the engine knows is always on record). Deleting
 * goes the other way round: the engine's object first, its D1 rows after (engine-rows.ts).
 * The histories a keep_history delete kept under an archive name are listed and deleted here too.
 */
import { isUniqueConflict } from "../db/unique-conflict";
import { z } from "zod";
import { Hono } from "hono";
import { and, asc, eq, gt, isNull } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import type { Env } from "../env";
import { archives, engines, tokens } from "../db/schema";
import {
  ROLES,
  ArchiveListQuery,
  ArchiveName,
  CreateEngineRequest,
  DeleteEngineQuery,
  IssueTokenRequest,
  type ArchiveListResponse,
  type CreateEngineResponse,
  type DeleteArchiveResponse,
  type DeleteEngineResponse,
  type IssuedToken,
  type Role,
} from "../protocol/admin";
import { constantTimeEqual, hashToken, newTokenId, newTokenSecret } from "../auth/tokens";
import type { EngineObject } from "../engine/engine-object";
import { errorResponse, replyResponse } from "./errors";
import { checkInput, readJson, readQuery } from "./validate";
import { forgetClaims } from "../relay/claim-gates";
import { engineStub, forgetEngine, placedEngineStub, type EnginePlacement } from "./engine-stub";
import { archiveName, deleteArchiveRows, deleteEngineRows } from "./engine-rows";

export const adminRoutes = new Hono<{ Bindings: Env }>();

adminRoutes.use("*", async (c, next) => {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(c.req.header("authorization") ?? "");
  if (!m?.[1]) return errorResponse(401, "missing_token", "Admin routes need `Authorization: Bearer <ADMIN_TOKEN>`.");
  // A deployment without the secret says so: a 403 would send its operator hunting for a typo.
  if (!c.env.ADMIN_TOKEN) {
    return errorResponse(500, "misconfigured", "ADMIN_TOKEN is not configured: the admin API is closed. Set it with `wrangler secret put ADMIN_TOKEN` (locally, in .dev.vars).");
  }
  if (!constantTimeEqual(m[1], c.env.ADMIN_TOKEN)) {
    return errorResponse(403, "forbidden", "This token is not the deployment's admin token.");
  }
  await next();
});

async function mint(engine: string, role: Role, label: string, now: number) {
  const token = newTokenSecret(role);
  const hash = await hashToken(token);
  return { token, row: { id: newTokenId(), engine, role, tokenHash: hash, label, createdAt: now, revokedAt: null } };
}

// A name with "@" is no engine's but may be an archive's: say where those are deleted.
const unknownEngine = (name: string) =>
  errorResponse(404, "unknown_engine", `No such engine '${name}'.${name.includes("@") ? ` A history kept under an archive name is deleted with DELETE /admin/archives/${name}.` : ""}`);

/**
 * Tells the engine's object its name and tokens. The object of an engine deleted under the same
 * name resets itself on the first try (EngineObject.destroy), so a failure is tried once more,
 * on the fresh instance.
 */
async function provision(env: Env, engine: EnginePlacement, hashes: Parameters<EngineObject["provision"]>[1], created = false): Promise<void> {
  try {
    await placedEngineStub(env, engine).provision(engine.name, hashes, created);
  } catch {
    await placedEngineStub(env, engine).provision(engine.name, hashes, created);
  }
  forgetClaims(env, engine.name);
}

adminRoutes.post("/engines", async (c) => {
  const req = await readJson(c, CreateEngineRequest);
  if (!req.ok) return req.response;
  const { name, location_hint: locationHint, jurisdiction } = req.value;
  const db = drizzle(c.env.DB);
  const existing = (await db.select().from(engines).where(eq(engines.name, name)).limit(1))[0];
  if (existing !== undefined) {
    if (existing.deletingSince !== null) {
      return errorResponse(409, "engine_exists", `Engine '${name}' is being deleted: repeat DELETE /admin/engines/${name} to finish, then create it.`);
    }
    return errorResponse(409, "engine_exists", `Engine '${name}' already exists. If this repeats a create whose answer was lost, its tokens were never seen: issue new ones with POST /admin/engines/${name}/tokens and revoke those labelled "created with the engine" (GET /admin/engines/${name}/tokens).`);
  }
  const now = Date.now();
  const minted = await Promise.all(ROLES.map((role) => mint(name, role, `${role} (created with the engine)`, now)));
  try {
    await db.batch([db.insert(engines).values({ name, createdAt: now, locationHint, jurisdiction }), db.insert(tokens).values(minted.map((m) => m.row))]);
  } catch (err) {
    // A create that won the race since our read; D1 failing is no name clash (an internal error, its id logged).
    if (!isUniqueConflict(err, "engines.name")) throw err;
    return errorResponse(409, "engine_exists", `Engine '${name}' already exists. If this repeats a create whose answer was lost, its tokens were never seen: issue new ones with POST /admin/engines/${name}/tokens and revoke those labelled "created with the engine" (GET /admin/engines/${name}/tokens).`);
  }
  await provision(c.env, { name, jurisdiction, locationHint }, minted.map((m) => ({ id: m.row.id, hash: m.row.tokenHash, role: m.row.role })), true);
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
    engines: rows.map((r) => ({
      name: r.name,
      created_at: r.createdAt / 1000,
      location_hint: r.locationHint,
      jurisdiction: r.jurisdiction,
      deleting_since: r.deletingSince === null ? null : r.deletingSince / 1000,
    })),
  });
});

/** The engine's row, unless there is none or it is being deleted. */
async function liveEngine(env: Env, name: string) {
  const row = (await drizzle(env.DB).select().from(engines).where(eq(engines.name, name)).limit(1))[0];
  return row !== undefined && row.deletingSince === null ? row : null;
}

adminRoutes.get("/engines/:name/tokens", async (c) => {
  const name = c.req.param("name");
  if ((await liveEngine(c.env, name)) === null) return unknownEngine(name);
  const rows = await drizzle(c.env.DB).select().from(tokens).where(eq(tokens.engine, name)).orderBy(tokens.createdAt);
  return c.json({
    tokens: rows.map((r) => ({ id: r.id, role: r.role, label: r.label, created_at: r.createdAt / 1000, revoked_at: r.revokedAt === null ? null : r.revokedAt / 1000 })),
  });
});

adminRoutes.post("/engines/:name/tokens", async (c) => {
  const name = c.req.param("name");
  const req = await readJson(c, IssueTokenRequest);
  if (!req.ok) return req.response;
  const engine = await liveEngine(c.env, name);
  if (engine === null) return unknownEngine(name);
  const m = await mint(name, req.value.role, req.value.label, Date.now());
  await drizzle(c.env.DB).insert(tokens).values(m.row);
  await provision(c.env, engine, [{ id: m.row.id, hash: m.row.tokenHash, role: m.row.role }]);
  const body: IssuedToken = { id: m.row.id, role: m.row.role, token: m.token };
  return c.json(body, 201);
});

adminRoutes.delete("/engines/:name/tokens/:id", async (c) => {
  const { name, id } = c.req.param();
  const db = drizzle(c.env.DB);
  const row = (await db.select().from(tokens).where(and(eq(tokens.engine, name), eq(tokens.id, id))).limit(1))[0];
  if (!row) return errorResponse(404, "unknown_token", `Engine '${name}' has no token '${id}'.`);
  if (row.revokedAt === null) await db.update(tokens).set({ revokedAt: Date.now() }).where(eq(tokens.id, id));
  // Told every time, so a revocation that failed halfway is completed by repeating it. The
  // engine releases the token's live claims and, for a trainer's, moves the gateway secret on:
  // this isolate's relay forgets what it knew of the engine at once, the others' within FRESH_MS.
  await (await engineStub(c.env, name))?.revokeToken(row.tokenHash);
  forgetClaims(c.env, name);
  return c.json({ success: true });
});

/**
 * Deletes an engine: its object's state first (refused while its agent is connected, unless
 * forced), then its D1 rows in chunks. The row is marked first thing after the object is gone,
 * so a delete cut off half-way is finished by repeating it, with the same archive name.
 */
adminRoutes.delete("/engines/:name", async (c) => {
  const name = c.req.param("name");
  const q = readQuery(c, DeleteEngineQuery);
  if (!q.ok) return q.response;
  const db = drizzle(c.env.DB);
  const row = (await db.select().from(engines).where(eq(engines.name, name)).limit(1))[0];
  if (row === undefined) return unknownEngine(name);
  let bodies: string | null = null;
  if (row.deletingSince === null) {
    const destroyed = await placedEngineStub(c.env, row).destroy({ force: q.value.force, keepHistory: q.value.keep_history });
    if (!destroyed.ok) return replyResponse(destroyed);
    bodies = destroyed.body.bodies;
    await db
      .update(engines)
      .set({ deletingSince: Date.now(), deletingKeepsHistory: q.value.keep_history })
      .where(and(eq(engines.name, name), isNull(engines.deletingSince)));
  } else if (row.deletingKeepsHistory !== null && row.deletingKeepsHistory !== q.value.keep_history) {
    // Repeated the other way, it would leave a history cut in two: part archived, part deleted.
    return row.deletingKeepsHistory
      ? errorResponse(409, "delete_keeps_history", `The delete of '${name}' under way keeps its history: repeat it with keep_history=true to finish it (then delete the archive if it is not wanted).`)
      : errorResponse(409, "delete_keeps_nothing", `The delete of '${name}' under way keeps no history, and has deleted some of it: repeat it without keep_history to finish it.`);
  }
  forgetEngine(c.env, name);
  forgetClaims(c.env, name);
  // Read back rather than taken from above: a concurrent delete may have marked it first.
  const since = (await db.select({ since: engines.deletingSince }).from(engines).where(eq(engines.name, name)).limit(1))[0]?.since ?? Date.now();
  const archive = q.value.keep_history ? { name: archiveName(name, since), at: since, bodies } : null;
  const result = await deleteEngineRows(c.env.DB, name, archive, c.env.LEDGER);
  const body: DeleteEngineResponse = { engine: name, done: result.done, history_kept_as: archive?.name ?? null, rows: result.rows };
  return c.json(body, result.done ? 200 : 202);
});

/**
 * The histories kept under an archive name, a page at a time in name order (each engine's
 * together, oldest first): a deployment that deletes engines daily has as many as it has days.
 * No row counts: counting an archive's calls would read every one of them.
 */
adminRoutes.get("/archives", async (c) => {
  const q = readQuery(c, ArchiveListQuery);
  if (!q.ok) return q.response;
  const { after, limit } = q.value;
  const rows = await drizzle(c.env.DB)
    .select()
    .from(archives)
    .where(after === undefined ? undefined : gt(archives.name, after))
    .orderBy(asc(archives.name))
    .limit(limit + 1);
  const page = rows.slice(0, limit);
  const body: ArchiveListResponse = {
    archives: page.map((r) => ({ name: r.name, engine: r.fromEngine, created_at: r.createdAt / 1000 })),
    next: rows.length > limit ? (page.at(-1)?.name ?? null) : null,
  };
  return c.json(body);
});

/**
 * Deletes an archive: its call bodies, its rows and its record, in the bounded chunks of an
 * engine's delete (engine-rows.ts), so a big one answers 202 until a repeated request finishes it.
 */
adminRoutes.delete("/archives/:name", async (c) => {
  // Checked by its name, so that a refusal names the path's `name`, not a body there is none of.
  const parsed = checkInput(z.object({ name: ArchiveName }), { name: c.req.param("name") });
  if (!parsed.ok) return parsed.response;
  const name = parsed.value.name;
  const engine = name.slice(0, name.indexOf("@"));
  // The delete that keeps it may still be re-filing rows under its name, and would record it again.
  const since = (await drizzle(c.env.DB).select({ since: engines.deletingSince }).from(engines).where(eq(engines.name, engine)).limit(1))[0]?.since;
  if (since !== undefined && since !== null && archiveName(engine, since) === name) {
    return errorResponse(409, "archive_incomplete", `Archive '${name}' is still being made: repeat DELETE /admin/engines/${engine}?keep_history=true until it is done, then delete the archive.`);
  }
  const result = await deleteArchiveRows(c.env.DB, { name, engine }, c.env.LEDGER);
  if (result === null) return errorResponse(404, "unknown_archive", `No such archive '${name}' (GET /admin/archives lists them).`);
  const body: DeleteArchiveResponse = { archive: name, done: result.done, rows: result.rows };
  return c.json(body, result.done ? 200 : 202);
});
