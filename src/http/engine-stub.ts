/**
 * The stub of an engine's Durable Object, addressed from the engine's D1 row: a jurisdiction is
 * part of the object's id, so no request reaches an engine without knowing it, and the location
 * hint goes with every get() (only the get() that creates the object heeds it).
 *
 * The route (the object's id and the get() options) is read once per isolate and kept: the hot
 * path costs no D1 query, and no `idFromName` either, which derives the id with SHA-256 every
 * time, about 23 thousand instructions in workerd (valgrind's callgrind, BENCHMARKS.md), on each of a
 * cycle's three requests. Only the stub is made per request: a stub belongs to its request.
 *
 * A kept route goes stale only when its engine is deleted and made again with another
 * jurisdiction while this isolate lives: the old object answers that there is no such engine,
 * and `movedEngineStub` then reads the row again. Routes are read again after ROUTE_TTL_MS too,
 * for callers that do not ask.
 */
import { eq } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import type { Env } from "../env";
import type { EngineObject } from "../engine/engine-object";
import type { Failure } from "../engine/reply";
import { engines } from "../db/schema";
import { LOCATION_HINTS, type Jurisdiction, type LocationHint } from "../protocol/admin";

// The protocol's hints must be ones the runtime takes.
LOCATION_HINTS satisfies readonly DurableObjectLocationHint[];

/** Bounded like the token hash cache: names come from request paths, so anyone can add some. */
const MAX_CACHED_ROUTES = 10_000;
const ROUTE_TTL_MS = 60_000;

type Route = { id: DurableObjectId; options: DurableObjectNamespaceGetDurableObjectOptions | undefined; readAt: number };
export type EnginePlacement = { name: string; jurisdiction: Jurisdiction | null; locationHint: LocationHint | null };
type Stub = DurableObjectStub<EngineObject>;
type RouteEnv = Pick<Env, "ENGINE" | "DB">;

const routes = new WeakMap<DurableObjectNamespace<EngineObject>, Map<string, Route>>();
const warnedUnconfined = new Set<string>();

function routesOf(env: Pick<Env, "ENGINE">): Map<string, Route> {
  let byName = routes.get(env.ENGINE);
  if (byName === undefined) routes.set(env.ENGINE, (byName = new Map()));
  return byName;
}

/**
 * The namespace an engine's object lives in. workerd (Miniflare: `npm start` and the tests)
 * implements no jurisdictions and throws for every one; there the object lives in the one
 * namespace there is, with a warning. Any other failure stands: a deployed engine must never
 * end up outside its jurisdiction.
 */
function namespaceOf(env: Pick<Env, "ENGINE">, e: EnginePlacement): DurableObjectNamespace<EngineObject> {
  if (e.jurisdiction === null) return env.ENGINE;
  try {
    return env.ENGINE.jurisdiction(e.jurisdiction);
  } catch (err) {
    if (!(err instanceof Error && /not implemented in workerd/.test(err.message))) throw err;
    if (!warnedUnconfined.has(e.name) && warnedUnconfined.add(e.name)) console.warn(`engine '${e.name}': this runtime has no jurisdictions (${err.message}); its object is not confined to '${e.jurisdiction}'`);
    return env.ENGINE;
  }
}

/** The stub of an engine whose row the caller has in hand (creating it, say); its route is kept. */
export function placedEngineStub(env: Pick<Env, "ENGINE">, e: EnginePlacement): Stub {
  const byName = routesOf(env);
  if (byName.size >= MAX_CACHED_ROUTES) byName.clear();
  const route: Route = {
    id: namespaceOf(env, e).idFromName(e.name),
    options: e.locationHint === null ? undefined : { locationHint: e.locationHint },
    readAt: Date.now(),
  };
  byName.set(e.name, route);
  return env.ENGINE.get(route.id, route.options);
}

/** The stub from a kept route, without any I/O, or undefined when the route must be read. */
export function cachedEngineStub(env: Pick<Env, "ENGINE">, name: string): Stub | undefined {
  const route = routes.get(env.ENGINE)?.get(name);
  if (route === undefined || Date.now() - route.readAt > ROUTE_TTL_MS) return undefined;
  return env.ENGINE.get(route.id, route.options);
}

/** The engine's stub, from its kept route or its D1 row; null when there is no such engine (or it is being deleted). */
export async function engineStub(env: RouteEnv, name: string): Promise<Stub | null> {
  const kept = cachedEngineStub(env, name);
  if (kept !== undefined) return kept;
  const row = (
    await drizzle(env.DB)
      .select({ jurisdiction: engines.jurisdiction, locationHint: engines.locationHint, deletingSince: engines.deletingSince })
      .from(engines)
      .where(eq(engines.name, name))
      .limit(1)
  )[0];
  if (row === undefined || row.deletingSince !== null) {
    forgetEngine(env, name);
    return null;
  }
  return placedEngineStub(env, { name, jurisdiction: row.jurisdiction, locationHint: row.locationHint });
}

/** Drops the kept route of an engine: it was deleted, or made again. */
export function forgetEngine(env: Pick<Env, "ENGINE">, name: string): void {
  routes.get(env.ENGINE)?.delete(name);
}

/** Whether an engine's object answered that it is no engine (never made, or deleted). */
export function isUnknownEngine(reply: { ok: boolean } | Failure): boolean {
  return !reply.ok && "error" in reply && reply.error === "unknown_engine";
}

/**
 * After `stale` answered that it is no engine: the stub of the engine's object if its row now
 * names another one (deleted and made again elsewhere), else null.
 */
export async function movedEngineStub(env: RouteEnv, name: string, stale: Stub): Promise<Stub | null> {
  forgetEngine(env, name);
  const fresh = await engineStub(env, name);
  return fresh !== null && !fresh.id.equals(stale.id) ? fresh : null;
}
