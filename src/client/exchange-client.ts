/**
 * A typed client for one engine of the exchange, built on the protocol's zod schemas: every
 * request is typed by them and every answer is checked against them.
 */
import { z } from "zod";
import {
  AckCommandResponse,
  BoolResponse,
  ClaimEpisodeResponse,
  CurrentBatchRolloutPoolInformation,
  EngineStatusResponse,
  EpisodeBufferResponse,
  PollCommandsResponse,
  RewardHistoryResponse,
  AbortEpisodeRequest,
  AckCommandRequest,
  ClaimEpisodeRequest,
  EndEpisodeRequest,
  RegisterEpisodeRequest,
  UpdateEngineStatusRequest,
  AgentHeartbeatRequest,
  BatchBoolResponse,
  BatchIsEpisodeClaimedRequest,
  BatchRegisterEpisodeRequest,
  EngineOverview,
  HeartbeatResponse,
  RunningEpisodesResponse,
  TrainerExitRequest,
  BufferConfigView,
  GetRolloutDataRequest,
  GetRolloutDataResponse,
  HealthResponse,
  PostStepsRequest,
  PostStepsResponse,
  StartRolloutRequest,
  StartRolloutResponse,
  UpdateBufferConfigRequest,
  GatewaySecretResponse,
  CompletedTasksResponse,
  BeginRunRequest,
  BeginRunResponse,
  HistoryRunsResponse,
  CallBatchResponse,
  MediaUploadResponse,
  SyncConfig,
  UpdateSyncConfigRequest,
  type CallBatch,
} from "../protocol";
import { queryString, requestJson, type FetchLike } from "./http";

const Success = z.object({ success: z.boolean() });
const CanContinue = z.object({ can_continue: z.boolean() });

export type EngineClientOptions = {
  /** The engine's base URL: `https://host/e/<engine>`, or `.../e/<engine>/t/<token>` to carry the token in the path. */
  baseUrl: string;
  /** Sent as a bearer header when given. */
  token?: string;
  fetch?: FetchLike;
};


/** Request bodies as the wire accepts them: fields with defaults may be omitted. */
type In<S extends z.ZodType> = z.input<S>;

/** What endClaim and abortClaim need of a claim's answer. */
export type ClaimedEpisode = Pick<ClaimEpisodeResponse, "success" | "client_uuid" | "episode_uuid" | "fence">;

/** An end's or abort's body without what names its claim, which comes from the claim's answer. */
type ClaimEnd<S extends z.ZodType> = Omit<In<S>, "client_uuid" | "episode_uuid" | "fence">;

/**
 * The claim's own names and fence, for its end or abort. An answer without a fence names no
 * claim (it failed, or an exchange too old to fence answered it): sending such an end anyway
 * would be the fenceless end docs/agentjet.md warns about, so it is refused here.
 */
function claimRef(claim: ClaimedEpisode): { client_uuid: string; episode_uuid: string; fence: number } {
  if (!claim.success || claim.fence === undefined) throw new Error(`not a claim with a fence: ${JSON.stringify(claim)}`);
  return { client_uuid: claim.client_uuid, episode_uuid: claim.episode_uuid, fence: claim.fence };
}

export class EngineClient {
  private readonly base: string;
  private readonly fetchFn: FetchLike;
  constructor(private readonly opts: EngineClientOptions) {
    this.base = opts.baseUrl.replace(/\/+$/, "");
    this.fetchFn = opts.fetch ?? ((input, init) => fetch(input, init));
  }

  private get<S extends z.ZodType>(path: string, schema: S, signal?: AbortSignal): Promise<z.output<S>> {
    return requestJson(this.fetchFn, this.base + path, schema, { method: "GET", token: this.opts.token, signal });
  }
  private post<S extends z.ZodType>(path: string, schema: S, body: unknown = {}): Promise<z.output<S>> {
    return requestJson(this.fetchFn, this.base + path, schema, { method: "POST", body, token: this.opts.token });
  }

  getEngineStatus = () => this.get("/get_engine_status", EngineStatusResponse);
  syncTrainConfig = (yaml: string) => this.post("/sync_train_config", Success, { yaml_as_string: yaml });
  startEngine = () => this.post("/start_engine", Success);
  stopEngine = () => this.post("/stop_engine", Success);
  updateEngineStatus = (req: In<typeof UpdateEngineStatusRequest>) =>
    this.post("/update_engine_status", BoolResponse, req);

  registerEpisode = (req: In<typeof RegisterEpisodeRequest>) =>
    this.post("/register_episode", BoolResponse, req);
  claimEpisode = (req: In<typeof ClaimEpisodeRequest>) =>
    this.post("/claim_episode", ClaimEpisodeResponse, req);
  /**
   * Pass the claim's `fence` (claimEpisode's answer carries it), or use endClaim: without one, an
   * end sent again after the same client claimed the episode again is taken as the new claim's
   * end (docs/agentjet.md, "Claims").
   */
  endEpisode = (req: In<typeof EndEpisodeRequest>) => this.post("/end_episode", Success, req);
  /** As endEpisode: pass the claim's `fence`, or use abortClaim. */
  abortEpisode = (req: In<typeof AbortEpisodeRequest>) =>
    this.post("/abort_episode", Success, req);
  /** Ends the claim that `claim` answered, with its fence, so that sending it again is always safe. */
  endClaim = (claim: ClaimedEpisode, req: ClaimEnd<typeof EndEpisodeRequest>) => this.endEpisode({ ...req, ...claimRef(claim) });
  /** Gives back the claim that `claim` answered, with its fence. */
  abortClaim = (claim: ClaimedEpisode, req: ClaimEnd<typeof AbortEpisodeRequest> = {}) => this.abortEpisode({ ...req, ...claimRef(claim) });
  canContinueEpisode = (req: { client_uuid: string; episode_uuid: string }) => this.post("/can_continue_episode", CanContinue, req);
  isEpisodeClaimed = (req: { episode_uuid: string; unregister_if_not_claimed?: boolean }) => this.post("/is_episode_claimed", BoolResponse, req);
  getEpisodeBuffer = () => this.post("/get_episode_buffer", EpisodeBufferResponse);

  updatePoolInfo = (info: In<typeof CurrentBatchRolloutPoolInformation>) =>
    this.post("/update_current_batch_rollout_pool_information", BoolResponse, info);
  getPoolInfo = () => this.get("/get_current_batch_rollout_pool_information", CurrentBatchRolloutPoolInformation);
  /** The current run's reward history, or run `run`'s. */
  getRewardHistory = (q: { run?: number } = {}) => this.get(`/get_reward_history${queryString(q)}`, RewardHistoryResponse);
  historyRuns = (q: { limit?: number; before?: number } = {}) => this.get(`/history/runs${queryString(q)}`, HistoryRunsResponse);
  beginHistoryRun = (req: In<typeof BeginRunRequest> = {}) => this.post("/history/begin_run", BeginRunResponse, req);

  /** Long-polls the agent command channel; `wait` seconds (at most 25) when nothing is due. */
  pollCommands = (q: { wait?: number; limit?: number; session?: string } = {}, signal?: AbortSignal) =>
    this.get(`/agent/commands${queryString(q)}`, PollCommandsResponse, signal);
  ackCommand = (req: In<typeof AckCommandRequest>) => this.post("/agent/ack", AckCommandResponse, req);
  heartbeat = (req: In<typeof AgentHeartbeatRequest>) => this.post("/agent/heartbeat", HeartbeatResponse, req);
  gatewaySecret = () => this.get("/agent/gateway_secret", GatewaySecretResponse);
  trainerExit = (req: In<typeof TrainerExitRequest>) => this.post("/agent/trainer_exit", Success, req);
  /** The gateway's recorded calls (the trajectory ledger); a resent batch (same batch_id) is recorded once. */
  postCalls = (batch: CallBatch) => this.post("/agent/calls", CallBatchResponse, batch);
  /** One medium taken out of recorded messages, by the SHA-256 of its string's UTF-8 (docs/ledger.md, "Media"). */
  putMedia = (sha256: string, data: string) =>
    requestJson(this.fetchFn, `${this.base}/agent/media/${sha256}`, MediaUploadResponse, { method: "PUT", body: { data }, token: this.opts.token });

  batchIsEpisodeClaimed = (req: In<typeof BatchIsEpisodeClaimedRequest>) => this.post("/batch/is_episode_claimed", BatchBoolResponse, req);
  batchRegisterEpisodes = (req: In<typeof BatchRegisterEpisodeRequest>) => this.post("/batch/register_episode", BatchBoolResponse, req);
  overview = () => this.get("/overview", EngineOverview);

  postSteps = (req: In<typeof PostStepsRequest>) => this.post("/steps", PostStepsResponse, req);
  getRolloutData = (req: In<typeof GetRolloutDataRequest> = {}) => this.post("/get_rollout_data", GetRolloutDataResponse, req);
  startRollout = (req: In<typeof StartRolloutRequest> = {}) => this.post("/start_rollout", StartRolloutResponse, req);
  configureBuffer = (req: In<typeof UpdateBufferConfigRequest>) => this.post("/buffer/config", BufferConfigView, req);
  health = () => this.get("/health", HealthResponse);
  syncConfig = () => this.get("/sync/config", SyncConfig);
  configureSync = (req: In<typeof UpdateSyncConfigRequest>) => this.post("/sync/config", SyncConfig, req);
  completedTasks = () => this.get("/completed_tasks", CompletedTasksResponse);
  runningEpisodes = (q: { limit?: number; cursor?: string } = {}) => this.get(`/running_episodes${queryString(q)}`, RunningEpisodesResponse);
}
