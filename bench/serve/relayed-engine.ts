/**
 * What the relay's benchmarks call through: an exchange with one engine, its ledger capture set,
 * and its agent, whose gateway the engine knows, the engine ROLLING. Of this tree, or of another
 * checkout (an A/B of the relay as it was against the relay as it is).
 */
import { LedgerClient } from "../../src/client";
import type { CaptureMode } from "../../src/protocol/ledger";
import { agentEnv, serveAgent, type AgentTarget } from "./agent";
import { createEngine, serveExchange, type EngineAccess } from "./exchange";

export type RelayedEngine = {
  url: string;
  /** workerd's processes. */
  pids: number[];
  engine: EngineAccess;
  agent: AgentTarget;
  /** The engine's ledger capture, as it reports it. */
  capture: string;
  stop(): Promise<void>;
};

export async function serveRelayedEngine(o: {
  /** Names the admin token and the engine. */
  name: string;
  claimKeySecret?: string;
  checkout?: string;
  inspectorPort?: number;
  /** Unset: the engine's default. */
  capture?: CaptureMode | undefined;
  /** The agent's state and logs. */
  agentDir: string;
  /** Settings the agent gets on top of agentEnv's. */
  agentSettings?: Record<string, string>;
}): Promise<RelayedEngine> {
  const ex = await serveExchange({
    prefix: o.name,
    ...(o.claimKeySecret !== undefined ? { claimKeySecret: o.claimKeySecret } : {}),
    ...(o.checkout !== undefined ? { checkout: o.checkout } : {}),
    ...(o.inspectorPort !== undefined ? { inspectorPort: o.inspectorPort } : {}),
  });
  let agent: AgentTarget | null = null;
  try {
    const engine = await createEngine(ex.url, ex.adminToken, o.name);
    const ledger = new LedgerClient({ baseUrl: engine.baseUrl, token: engine.operatorToken });
    if (o.capture !== undefined) await ledger.configure({ capture: o.capture });
    const capture = (await ledger.config()).capture;
    agent = await serveAgent(agentEnv({ server: ex.url, engine: engine.name, trainerToken: engine.trainerToken, dir: o.agentDir }, o.agentSettings), o.checkout);
    for (let i = 0; (await gatewayUrl(engine)) !== agent.gateway; i++) {
      if (i > 300) throw new Error(`the agent${o.checkout !== undefined ? ` of ${o.checkout}` : ""} never reported its gateway`);
      await new Promise((r) => setTimeout(r, 100));
    }
    await engine.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    const a = agent;
    return {
      url: ex.url,
      pids: ex.pids,
      engine,
      agent: a,
      capture,
      stop: async () => {
        await a.stop().catch(() => a.kill());
        await ex.stop();
      },
    };
  } catch (e) {
    await agent?.stop().catch(() => agent?.kill());
    await ex.stop();
    throw e;
  }
}

/** A claim's OpenAI base URL and per-claim key, and its episode. */
export type RelayedClaim = { episode: string; url: string; key: string };

/**
 * `n` episodes `<prefix>-<i>` whose calls go to `upstream` (…/v1 added), registered in batches
 * and claimed by clients `<prefix>-c-<i>`, in order: claim i holds episode i.
 */
export async function claimRelayed(engine: EngineAccess, o: { prefix: string; n: number; upstream: string; trainerKey?: string }): Promise<RelayedClaim[]> {
  const trainer = engine.as("trainer");
  const client = engine.as("client");
  for (let i = 0; i < o.n; i += 100) {
    const episodes = Array.from({ length: Math.min(100, o.n - i) }, (_, k) => ({ episode_uuid: `${o.prefix}-${i + k}`, openai_base_url: `${o.upstream}/v1`, openai_api_key: o.trainerKey ?? "sk-bench-trainer", zmq_listen_result_addr: "" }));
    await trainer.batchRegisterEpisodes({ episodes });
  }
  const out: RelayedClaim[] = [];
  for (let i = 0; i < o.n; i++) {
    const c = await client.claimEpisode({ client_uuid: `${o.prefix}-c-${i}`, discard_episode_timeout: 3600 });
    if (!c.success) throw new Error(`claim ${i}: ${c.fail_cause}`);
    out.push({ episode: c.episode_uuid, url: c.openai_base_url, key: c.openai_api_key });
  }
  return out;
}

/**
 * The engine's own counts of the calls its relay admitted and the requests that carried them, with
 * the ledger's (one a recorded batch, naming its claims; absent in a checkout from before them),
 * read loosely as gatewayUrl is.
 */
export async function relayCounts(engine: EngineAccess): Promise<{ calls: number; engine_requests: number }> {
  const res = await fetch(`${engine.baseUrl}/overview`, { headers: { authorization: `Bearer ${engine.clientToken}` } });
  const body = (await res.json()) as { relay?: { calls?: unknown; engine_requests?: unknown }; ledger?: { engine_requests?: unknown } };
  const { calls, engine_requests } = body.relay ?? {};
  if (typeof calls !== "number" || typeof engine_requests !== "number") throw new Error(`the engine's overview has no relay counts (${res.status})`);
  const ledger = body.ledger?.engine_requests;
  return { calls, engine_requests: engine_requests + (typeof ledger === "number" ? ledger : 0) };
}

/** The gateway the engine's overview names (to the trainer: other roles see it hidden), read loosely: an older checkout's overview lacks fields this tree's client requires. */
async function gatewayUrl(engine: EngineAccess): Promise<unknown> {
  const res = await fetch(`${engine.baseUrl}/overview`, { headers: { authorization: `Bearer ${engine.tokens.trainer}` } });
  const body = (await res.json()) as { agent?: { gateway_url?: unknown } };
  return body.agent?.gateway_url;
}
