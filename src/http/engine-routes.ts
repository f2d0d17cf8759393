/**
 * The engine API at /e/<engine>/... (bearer token) and /e/<engine>/t/<token>/... (token in the
 * base URL, for unmodified AgentJet clients that cannot send headers). Same paths and JSON as
 * AgentJet's swarm server. Each request costs one RPC to the engine's Durable Object, which
 * also checks the token: no D1 round trip on the hot path.
 */
import { Hono, type Context } from "hono";
import { z } from "zod";
import type { Env } from "../env";
import type { EngineObject } from "../engine/engine-object";
import type { Caller } from "../engine/caller";
import type { Reply } from "../engine/reply";
import { EngineName } from "../protocol/admin";
import {
  AbortEpisodeRequest,
  CanContinueEpisodeRequest,
  CheckWhetherEpisodeClaimedRequest,
  ClaimEpisodeRequest,
  CurrentBatchRolloutPoolInformation,
  EndEpisodeRequest,
  RegisterEpisodeRequest,
  SyncTrainConfigRequest,
  UpdateEngineStatusRequest,
} from "../protocol/swarm";
import { AckCommandRequest, PollCommandsQuery } from "../protocol/commands";
import { AgentHeartbeatRequest, BatchIsEpisodeClaimedRequest, BatchRegisterEpisodeRequest, TrainerExitRequest } from "../protocol/agent";
import { constantTimeEqual, hashToken } from "../auth/tokens";
import { errorJson, replyJson } from "./errors";
import { readJson, readQuery } from "./validate";

type Stub = DurableObjectStub<EngineObject>;
export type EngineVars = { stub: Stub; caller: Caller };
type EngineContext = Context<{ Bindings: Env; Variables: EngineVars }>;
type Call = (stub: Stub, caller: Caller, c: EngineContext) => Promise<Reply<unknown> | Response>;

const hashCache = new Map<string, string>();

/** Token hashes are deterministic, so caching them is safe; revocation is checked by the engine. */
async function cachedHash(token: string): Promise<string> {
  let h = hashCache.get(token);
  if (h === undefined) {
    if (hashCache.size > 10_000) hashCache.clear();
    h = await hashToken(token);
    hashCache.set(token, h);
  }
  return h;
}

function bearer(c: Context): string | null {
  const h = c.req.header("authorization");
  const m = h ? /^Bearer\s+(\S+)\s*$/i.exec(h) : null;
  return m?.[1] ?? null;
}

const NoBody = z.object({}).loose();

/** Registers the engine API under `prefix` (`/e/:engine` or `/e/:engine/t/:token`). */
export function engineRoutes(app: Hono<{ Bindings: Env; Variables: EngineVars }>, prefix: string): void {
  app.use(`${prefix}/*`, async (c, next) => {
    const engine = c.req.param("engine") ?? "";
    if (!EngineName.safeParse(engine).success) return errorJson(c, 404, "unknown_engine", `No such engine '${engine}'.`);
    const token = bearer(c) ?? c.req.param("token") ?? null;
    if (token === null) {
      return errorJson(c, 401, "missing_token", "This route needs a token: send `Authorization: Bearer <token>` or use the base URL /e/<engine>/t/<token>.");
    }
    const admin = c.env.ADMIN_TOKEN !== undefined && c.env.ADMIN_TOKEN !== "" && constantTimeEqual(token, c.env.ADMIN_TOKEN);
    c.set("caller", admin ? { admin: true } : { admin: false, tokenHash: await cachedHash(token) });
    c.set("stub", c.env.ENGINE.get(c.env.ENGINE.idFromName(engine)));
    await next();
  });

  const handle = (call: Call) => async (c: EngineContext) => {
    const out = await call(c.get("stub"), c.get("caller"), c);
    return out instanceof Response ? out : replyJson(c, out);
  };
  const body =
    <S extends z.ZodType>(schema: S, run: (stub: Stub, caller: Caller, input: z.output<S>, c: EngineContext) => Promise<Reply<unknown>>, emptyAs?: unknown): Call =>
    async (stub, caller, c) => {
      const parsed = await readJson(c, schema, emptyAs);
      return parsed.ok ? run(stub, caller, parsed.value, c) : parsed.response;
    };

  // Engine status and configuration
  app.get(`${prefix}/get_engine_status`, handle((s, who) => s.getEngineStatus(who)));
  app.post(`${prefix}/sync_train_config`, handle(body(SyncTrainConfigRequest, (s, who, b) => s.syncTrainConfig(who, b.yaml_as_string))));
  app.post(`${prefix}/start_engine`, handle(body(NoBody, (s, who) => s.startEngine(who), {})));
  app.post(`${prefix}/stop_engine`, handle(body(NoBody, (s, who) => s.stopEngine(who), {})));
  app.post(`${prefix}/update_engine_status`, handle(body(UpdateEngineStatusRequest, (s, who, b) => s.updateEngineStatus(who, b))));

  // Episodes
  app.post(`${prefix}/register_episode`, handle(body(RegisterEpisodeRequest, (s, who, b) => s.registerEpisode(who, b))));
  app.post(
    `${prefix}/claim_episode`,
    handle(body(ClaimEpisodeRequest, (s, who, b, c) => s.claimEpisode(who, b, new URL(c.req.url).origin))),
  );
  app.post(`${prefix}/end_episode`, handle(body(EndEpisodeRequest, (s, who, b) => s.endEpisode(who, b))));
  app.post(`${prefix}/abort_episode`, handle(body(AbortEpisodeRequest, (s, who, b) => s.abortEpisode(who, b))));
  app.post(
    `${prefix}/can_continue_episode`,
    handle(body(CanContinueEpisodeRequest, (s, who, b) => s.canContinueEpisode(who, b.client_uuid, b.episode_uuid))),
  );
  app.post(
    `${prefix}/is_episode_claimed`,
    handle(body(CheckWhetherEpisodeClaimedRequest, (s, who, b) => s.isEpisodeClaimed(who, b.episode_uuid, b.unregister_if_not_claimed))),
  );
  app.post(`${prefix}/get_episode_buffer`, handle(body(NoBody, (s, who) => s.getEpisodeBuffer(who), {})));

  // Pool information and reward history
  app.post(
    `${prefix}/update_current_batch_rollout_pool_information`,
    handle(body(CurrentBatchRolloutPoolInformation, (s, who, b) => s.updatePoolInfo(who, b))),
  );
  app.get(`${prefix}/get_current_batch_rollout_pool_information`, handle((s, who) => s.getPoolInfo(who)));
  app.get(`${prefix}/get_reward_history`, handle((s, who) => s.getRewardHistory(who)));

  // The local-agent's command channel
  app.get(
    `${prefix}/agent/commands`,
    handle(async (s, who, c) => {
      const q = readQuery(c, PollCommandsQuery);
      return q.ok ? s.agentPoll(who, q.value) : q.response;
    }),
  );
  app.post(`${prefix}/agent/ack`, handle(body(AckCommandRequest, (s, who, b) => s.agentAck(who, b))));
  app.post(`${prefix}/agent/heartbeat`, handle(body(AgentHeartbeatRequest, (s, who, b) => s.agentHeartbeat(who, b))));
  app.post(`${prefix}/agent/trainer_exit`, handle(body(TrainerExitRequest, (s, who, b) => s.trainerExit(who, b))));

  // Batched trainer calls, for the agent's facade that coalesces many runner threads' requests
  app.post(`${prefix}/batch/is_episode_claimed`, handle(body(BatchIsEpisodeClaimedRequest, (s, who, b) => s.batchIsEpisodeClaimed(who, b.checks))));
  app.post(`${prefix}/batch/register_episode`, handle(body(BatchRegisterEpisodeRequest, (s, who, b) => s.batchRegisterEpisodes(who, b.episodes))));

  // A summary for people and dashboards
  app.get(`${prefix}/overview`, handle((s, who) => s.overview(who)));
}
