/**
 * The isolate's claim gates (claim-gate.ts), one per engine it relays for, and what forgets
 * them: the engine API's ends, aborts and status changes handled in this isolate take effect on
 * its relay at once, not after the gate's FRESH_MS.
 */
import type { Env } from "../env";
import type { EngineOp } from "../auth/roles";
import type { Reply } from "../engine/reply";
import { engineStub, isUnknownEngine, movedEngineStub } from "../http/engine-stub";
import { fail } from "../engine/reply";
import { ClaimGate } from "./claim-gate";
import { FailureTally } from "./relay-failures";

/** Engines whose gates (and failure tallies) an isolate keeps; past it the oldest goes (its claims are asked about again). */
const MAX_ENGINES = 1_000;

/** What an isolate keeps of an engine it relays for: the gate that admits its calls, and the tally of its calls that failed. */
type EngineRelay = { gate: ClaimGate; failures: FailureTally };

const relays = new WeakMap<Env["ENGINE"], Map<string, EngineRelay>>();

function relaysOf(env: Pick<Env, "ENGINE">): Map<string, EngineRelay> {
  let byEngine = relays.get(env.ENGINE);
  if (byEngine === undefined) relays.set(env.ENGINE, (byEngine = new Map()));
  return byEngine;
}

function relayOf(env: Pick<Env, "ENGINE" | "DB">, engine: string): EngineRelay {
  const byEngine = relaysOf(env);
  let relay = byEngine.get(engine);
  if (relay === undefined) {
    if (byEngine.size >= MAX_ENGINES) byEngine.delete(byEngine.keys().next().value as string);
    const gate = new ClaimGate(async (items) => {
      // A stub belongs to its request: made for each batch, from the kept route.
      const stub = await engineStub(env, engine);
      if (stub === null) return fail(404, "unknown_engine", `No such engine '${engine}'.`);
      const reply = await stub.relaySync(items);
      if (!isUnknownEngine(reply)) return reply;
      const moved = await movedEngineStub(env, engine, stub);
      return moved === null ? reply : moved.relaySync(items);
    });
    const failures = new FailureTally(async (report) => {
      const stub = await engineStub(env, engine);
      if (stub !== null) await stub.relayFailures(report);
    });
    byEngine.set(engine, (relay = { gate, failures }));
  }
  return relay;
}

/** The gate of an engine's relayed calls in this isolate. */
export const claimGate = (env: Pick<Env, "ENGINE" | "DB">, engine: string): ClaimGate => relayOf(env, engine).gate;

/** The isolate's tally of an engine's relayed calls that failed. */
export const relayFailures = (env: Pick<Env, "ENGINE" | "DB">, engine: string): FailureTally => relayOf(env, engine).failures;

/** Forgets what the gate knows of an engine (deleted, made again), or of one of its episodes. */
export function forgetClaims(env: Pick<Env, "ENGINE">, engine: string, episodeUuid?: string): void {
  relaysOf(env).get(engine)?.gate.forget(episodeUuid);
}

/**
 * Before a read of the engine handled in this isolate: the calls this isolate admitted and has
 * not yet sent go first, and the failures it counted, so the reader sees every one of them
 * (others' within FLUSH_MS and SEND_MS).
 */
export async function beforeEngineRead(env: Pick<Env, "ENGINE">, engine: string): Promise<void> {
  const relay = relaysOf(env).get(engine);
  await Promise.all([relay?.gate.flush(), relay?.failures.flush()]);
}

/** Operations after which nothing the gate knows of the engine holds: its status, capture or run changed. */
const ENGINE_WIDE = new Set<EngineOp>(["update_engine_status", "start_engine", "stop_engine", "agent_trainer_exit", "configure_ledger", "configure_sync", "sync_train_config", "begin_history_run"]);

/**
 * After an engine API call handled in this isolate: an end or abort forgets its episode's claim,
 * a claim the claims before it of its episode, and a change to the engine everything.
 */
export function afterEngineOp(env: Pick<Env, "ENGINE">, engine: string, op: EngineOp, input: unknown, reply: Reply<unknown>): void {
  const gate = relaysOf(env).get(engine)?.gate;
  if (gate === undefined) return;
  if (ENGINE_WIDE.has(op)) return gate.forget();
  // The agent's heartbeats come every few seconds; only one that names another gateway changes what calls go to.
  if (op === "agent_heartbeat") {
    if (reply.ok && gatewayOf(input) !== gate.gatewayUrl) gate.forget();
    return;
  }
  if (op === "end_episode" || op === "abort_episode") return forgetClaims(env, engine, episodeOf(input));
  if (op === "claim_episode" && reply.ok) {
    const episode = episodeOf(reply.body);
    if (episode !== undefined) forgetClaims(env, engine, episode);
  }
}

function gatewayOf(v: unknown): string | null {
  if (typeof v !== "object" || v === null || !("gateway_url" in v)) return null;
  return typeof v.gateway_url === "string" ? v.gateway_url : null;
}

function episodeOf(v: unknown): string | undefined {
  if (typeof v !== "object" || v === null || !("episode_uuid" in v)) return undefined;
  return typeof v.episode_uuid === "string" ? v.episode_uuid : undefined;
}
