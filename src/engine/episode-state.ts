/**
 * What every part of the episodes' work shares: the engine's store and buffer, the host's clock
 * and outputs, and the two counters kept in memory (the queue's next position, the highest fence).
 */
import type { CommandBody } from "../protocol/commands";
import type { EngineStore } from "./engine-store";
import type { EpisodeRow } from "./episode-views";
import type { OutboxItem } from "./outbox";
import type { RolloutBuffer } from "./rollout-buffer";
import { claimsLive } from "./rules";

/** What ending or releasing a claim needs of its episode. */
export type ClaimRow = Pick<EpisodeRow, "episode_uuid" | "fence" | "client_uuid" | "task_id" | "episode_type" | "zmq_addr" | "claim_weight_version">;
export const CLAIM_ROW_COLUMNS = "episode_uuid, fence, client_uuid, task_id, episode_type, zmq_addr, claim_weight_version";

/** A claim's identity as its client names it; the fence is ours, AgentJet's clients omit it. */
export type ClaimRef = { client_uuid: string; episode_uuid: string; fence?: number | undefined };

/**
 * Whether the caller whose token hash is `actor` (null: the admin) may act on a claim made with
 * the token `claimedBy` (episodes.claimed_by). A claim is its token's: every token of an engine
 * reads running_episodes, which shows each claim's client_uuid and fence, so those alone would
 * let one rollout host end or abort another's claim. A claim tied to no token (the admin's, or
 * made before engine migration 17) is open to every caller, as before; the admin, who may
 * revoke any token (which releases its claims) or stop the engine, may act on every claim.
 */
export function mayActOn(claimedBy: string | null, actor: string | null): boolean {
  return claimedBy === null || actor === null || claimedBy === actor;
}

export type EpisodesHost = {
  now(): number;
  armBy(t: number | null): void;
  addOutbox(item: OutboxItem): void;
  enqueue(body: CommandBody): void;
  /** A claim ended (with a result or without): its recorded calls can be gathered (ledger-compactions.ts). */
  claimEnded(episode: string, fence: number): void;
};

export class EpisodeState {
  /**
   * The next FIFO position. Kept in memory, not written on every registration: only registered
   * episodes hold a position, so on start-up one probe of their index gives a safe next value.
   */
  nextQueueSeq: number;
  /** The highest fence this engine has issued: where a newly registered episode's fences start. */
  fenceHigh: number;
  /**
   * The claims awaiting their key's signature: the queue position of the episode each picked
   * (not written yet), and whether it is a train claim (episode-claims.ts).
   */
  readonly claimsSigning = new Map<number, boolean>();

  constructor(
    readonly store: EngineStore,
    readonly buffer: RolloutBuffer,
    readonly host: EpisodesHost,
  ) {
    const sql = store.sql;
    this.nextQueueSeq = (sql.exec<{ m: number | null }>("SELECT MAX(queue_seq) AS m FROM episodes WHERE state = 'registered'").one().m ?? 0) + 1;
    const maxFence = (table: string): number => sql.exec<{ m: number | null }>(`SELECT MAX(fence) AS m FROM ${table}`).one().m ?? 0;
    this.fenceHigh = Math.max(store.meta.fenceFloor, maxFence("episodes"), maxFence("finished"));
  }

  /** Whether claims live now (rules.ts claimsLive). */
  live(): boolean {
    return claimsLive(this.store.meta.status, this.store.meta.sync);
  }

  /** Whether an episode given back goes back to the queue: while rolling, and through a sync that keeps the pool. */
  requeues(): boolean {
    const status = this.store.meta.status;
    return status === "ENGINE.ROLLING" || (status === "ENGINE.WEIGHT_SYNCING" && this.live());
  }

  episode(uuid: string): EpisodeRow | null {
    return this.store.sql.exec<EpisodeRow>("SELECT * FROM episodes WHERE episode_uuid = ?", uuid).toArray()[0] ?? null;
  }
}
