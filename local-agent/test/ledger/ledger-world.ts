/**
 * The world the ledger's end-to-end tests run in: the real Worker (Miniflare, D1 and R2) served by
 * the local exchange, the test file's own model server, and for each test a temp dir and cleanups
 * (run last first). `claimed` makes a fresh engine capturing as told, runs the agent with its
 * gateway in front of the model, sets the engine ROLLING, registers episode ep-1 and claims it as
 * client c1; it gives the claim, the engine's clients, and the reads a test makes of the ledger.
 */
import { randomUUID } from "node:crypto";
import { afterAll, afterEach, beforeAll, beforeEach, expect } from "vitest";
import { startLocalExchange, type LocalExchange } from "../../../scripts/local/exchange";
import { AdminClient, EngineClient, LedgerClient } from "../../../src/client";
import type { AgentConfig } from "../../src/config";
import { runAgent, testConfig } from "../support/agent-harness";
import { tempDir } from "../support/temp";
import { waitUntil } from "../support/wait";

export type Role = "operator" | "trainer" | "client" | "viewer";

export type ClaimOptions = {
  /** The engine's name, before its random suffix. */
  engine: string;
  capture: "messages" | "tokens";
  /** The agent's inference upstream (`…/v1`); the world's model by default. The episode's openai_base_url is the model's either way. */
  upstream?: string;
  /** More of the agent's configuration (a token dialect). */
  agent?: Partial<AgentConfig>;
  /** The weight version the trainer reports with ROLLING. */
  weightVersion: number;
  discardEpisodeTimeout: number;
  /** The type c1 claims ep-1 as; "train" by default. */
  episodeType?: "train" | "eval";
};

export type LedgerWorld<M> = {
  /** The model server, started before the file's tests. */
  readonly model: M;
  /** Run after each test, the last pushed first. */
  readonly cleanups: Array<() => unknown>;
  claimed(opts: ClaimOptions): ReturnType<typeof claimIn>;
};

/**
 * Registers the file's hooks: the model (`start`) and an exchange whose admin token and claim-key
 * secret are named for `name`, for the whole file; a temp dir and the cleanups for each test.
 * `v1` is the model's OpenAI base URL.
 */
export function ledgerWorld<M extends { close(): Promise<unknown> }>(name: string, start: () => Promise<M>, v1: (model: M) => string): LedgerWorld<M> {
  const admin = `${name}-admin`;
  let ex: LocalExchange | undefined;
  let model: M | undefined;
  let dir: ReturnType<typeof tempDir> | undefined;
  const cleanups: Array<() => unknown> = [];
  beforeAll(async () => {
    model = await start();
    ex = await startLocalExchange({ port: 0, persistDir: null, adminToken: admin, claimKeySecret: `${name}-claim-secret` });
  });
  afterAll(async () => {
    await ex?.stop();
    await model?.close();
  });
  beforeEach(() => {
    dir = tempDir();
  });
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
    dir?.remove();
  });
  return {
    get model() {
      return model!;
    },
    cleanups,
    claimed: (opts) => claimIn({ url: ex!.url, admin, dir: dir!.path, v1: v1(model!), cleanups }, opts),
  };
}

async function claimIn(world: { url: string; admin: string; dir: string; v1: string; cleanups: Array<() => unknown> }, opts: ClaimOptions) {
  const created = await new AdminClient({ origin: world.url, adminToken: world.admin }).createEngine(`${opts.engine}-${randomUUID().slice(0, 8)}`);
  const base = `${world.url}/e/${created.engine}`;
  const tokens = created.tokens as Record<Role, string>;
  const role = (r: Role) => new EngineClient({ baseUrl: base, token: tokens[r] });
  const ledger = (r: Role) => new LedgerClient({ baseUrl: base, token: tokens[r] });
  await ledger("operator").configure({ capture: opts.capture });
  const engine = { name: created.engine, baseUrl: base, tokens, operator: role("operator"), trainer: role("trainer"), client: role("client"), viewer: role("viewer") };
  const agent = await runAgent(testConfig(world.url, engine, world.dir, { inferenceUpstream: opts.upstream ?? world.v1, ...opts.agent }));
  world.cleanups.push(() => agent.stop());
  await waitUntil(async () => (await role("trainer").overview()).agent.gateway_url === agent.gatewayUrl, "the heartbeat to report the gateway");
  await role("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1, weight_version: opts.weightVersion });
  await role("trainer").registerEpisode({ episode_uuid: "ep-1", openai_base_url: world.v1, openai_api_key: "sk-trainer", zmq_listen_result_addr: "" });
  const claim = await role("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: opts.discardEpisodeTimeout, episode_type: opts.episodeType });
  expect(claim.success).toBe(true);

  /** The client ends ep-1 with reward 1. */
  const end = () => role("client").endEpisode({ client_uuid: "c1", episode_uuid: "ep-1", task_id: "t1", workflow_output: { reward: 1, is_success: true, metadata: { task_id: "t1" }, log_metrics: {} } });
  /** The export's JSONL as text, read as the viewer. */
  const exportText = async (): Promise<string> => {
    const res = await fetch(`${base}/trajectories/export?format=jsonl`, { headers: { authorization: `Bearer ${tokens.viewer}` } });
    expect(res.status).toBe(200);
    return await res.text();
  };
  /** The export's JSONL, a trajectory a line. */
  const exportLines = async (): Promise<Record<string, unknown>[]> =>
    (await exportText())
      .split("\n")
      .filter((l) => l !== "")
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  /** ep-1's trajectory once it has `calls` calls (and, with `ended`, once the claim has ended); `what` names the wait. */
  const recorded = (calls: number, what: string, opts: { ended?: boolean; timeoutMs?: number } = {}) =>
    waitUntil(
      async () => {
        const got = await ledger("viewer").trajectory("ep-1").catch(() => null);
        return got !== null && (opts.ended !== true || got.outcome === "ended") && got.calls.length === calls ? got : null;
      },
      what,
      opts.timeoutMs,
    );
  return { claim, base, tokens, role, ledger, end, exportText, exportLines, recorded };
}
