/**
 * The stub of an engine's Durable Object. A stub belongs to the request that made it, but the
 * object's id does not: `idFromName` derives it with SHA-256 every time, about 23 thousand
 * instructions in workerd (bench:instr, BENCHMARKS.md), on each of a cycle's three requests.
 * So ids are kept per namespace, and only the stub is made per request.
 */
import type { Env } from "../env";
import type { EngineObject } from "../engine/engine-object";

/** Bounded like the token hash cache: names come from request paths, so anyone can add some. */
const MAX_CACHED_IDS = 10_000;

const ids = new WeakMap<DurableObjectNamespace<EngineObject>, Map<string, DurableObjectId>>();

export function engineStub(env: Pick<Env, "ENGINE">, name: string): DurableObjectStub<EngineObject> {
  let byName = ids.get(env.ENGINE);
  if (byName === undefined) ids.set(env.ENGINE, (byName = new Map()));
  let id = byName.get(name);
  if (id === undefined) {
    if (byName.size >= MAX_CACHED_IDS) byName.clear();
    id = env.ENGINE.idFromName(name);
    byName.set(name, id);
  }
  return env.ENGINE.get(id);
}
