/**
 * Episodes and their leases: the trainer registers episodes into a FIFO queue, a client claims
 * the head (a lease with a fence, the claim's attempt number), and the claim ends with a result,
 * is aborted, or is reaped when its lease expires. Every method runs inside the engine's
 * transaction (or shared turn) that its caller opens; nothing here commits on its own.
 *
 * This class is the episodes' face to the engine; the work is in a module per concern:
 * episode-queue.ts (the FIFO queue and fences), episode-claims.ts (claims), episode-ends.ts
 * (ends, aborts, deliveries), episode-records.ts (what a claim leaves behind: trajectory,
 * failure and buffer rows), episode-leases.ts (reaping and weight-sync leases), over
 * episode-state.ts.
 */
import type {
  AbortEpisodeRequest,
  BoolResponse,
  ClaimEpisodeRequest,
  ClaimEpisodeResponse,
  EndEpisodeCall,
  EndEpisodeRequest,
  RegisterEpisodeRequest,
} from "../protocol/swarm";
import type { CommandBody } from "../protocol/commands";
import type { EngineStore } from "./engine-store";
import type { EpisodeRow } from "./episode-views";
import { canContinue, claim, claimsOutstanding, type Claimant } from "./episode-claims";
import { abort, delivered, end, endPayload } from "./episode-ends";
import { armForLeases, earliestLeaseExpiry, extendLeases, reapExpired, releaseClaimsOf } from "./episode-leases";
import { claimedCheck, clearAll, clearFinished, counts, register, wasReset } from "./episode-queue";
import { EpisodeState, type EpisodesHost } from "./episode-state";
import type { RolloutBuffer } from "./rollout-buffer";
import type { ClaimsOutstanding } from "./buffer-state";
import type { Reply } from "./reply";

export class Episodes {
  private readonly state: EpisodeState;

  constructor(store: EngineStore, buffer: RolloutBuffer, host: EpisodesHost) {
    this.state = new EpisodeState(store, buffer, host);
  }

  /** Where the queue's positions stand, to be put back if the transaction rolls back (restoreQueue). */
  queueMark(): number {
    return this.state.nextQueueSeq;
  }

  restoreQueue(mark: number): void {
    this.state.nextQueueSeq = mark;
  }

  // ---------------------------------------------------------------- the trainer's side

  register(req: RegisterEpisodeRequest): BoolResponse {
    return register(this.state, req);
  }

  claimedCheck(episodeUuid: string, unregister: boolean): BoolResponse {
    return claimedCheck(this.state, episodeUuid, unregister);
  }

  // ---------------------------------------------------------------- the client's side

  claim(req: ClaimEpisodeRequest, origin: string, keySecret: string, claimant: Claimant): Promise<Reply<ClaimEpisodeResponse>> {
    return claim(this.state, req, origin, keySecret, claimant);
  }

  endPayload(req: EndEpisodeCall): Reply<string> {
    return endPayload(this.state, req);
  }

  /**
   * For end, abort and canContinue, `actor` is the caller's token hash, null for the admin
   * (caller.ts callerToken): a claim is its token's (episode-state.ts mayActOn).
   */
  end(req: EndEpisodeRequest, payload: string, actor: string | null): Reply<{ success: boolean }> {
    return end(this.state, req, payload, actor);
  }

  abort(req: AbortEpisodeRequest, actor: string | null): Reply<{ success: boolean }> {
    return abort(this.state, req, actor);
  }

  canContinue(clientUuid: string, episodeUuid: string, actor: string | null): { can_continue: boolean } {
    return canContinue(this.state, clientUuid, episodeUuid, actor);
  }

  // ---------------------------------------------------------------- leases, the agent's acks, clearing

  /** The train rollouts claims began that the trainer has not consumed (pace's share of them). */
  claimsOutstanding(): ClaimsOutstanding {
    return claimsOutstanding(this.state);
  }

  reapExpired(now: number): void {
    reapExpired(this.state, now);
  }

  /** Releases the live claims made with a token being revoked (episode-leases.ts); returns how many. */
  releaseClaimsOf(tokenHash: string): number {
    return releaseClaimsOf(this.state, tokenHash);
  }

  earliestLeaseExpiry(): number | null {
    return earliestLeaseExpiry(this.state);
  }

  /** A weight sync that kept the claims ran from `since` to `until`: their leases get its length back (episode-leases.ts). */
  extendLeases(since: number, until: number): void {
    extendLeases(this.state, since, until);
  }

  /** Arms the alarm for the earliest lease's deadline, which the sync config moves during a sync. */
  armForLeases(): void {
    armForLeases(this.state);
  }

  delivered(body: Extract<CommandBody, { kind: "deliver" }>, succeeded: boolean, detail: string): void {
    delivered(this.state, body, succeeded, detail);
  }

  wasReset(body: Extract<CommandBody, { kind: "reset" }>, succeeded: boolean): void {
    wasReset(this.state, body, succeeded);
  }

  /** `keepEnds`: the batch's ends are remembered for their repeats (a weight sync), see episode-queue.ts clearAll. */
  clearAll(keepEnds: boolean): void {
    clearAll(this.state, keepEnds);
  }

  clearFinished(): void {
    clearFinished(this.state);
  }

  counts(): { registered: number; claimed: number; resetting: number } {
    return counts(this.state);
  }

  episode(uuid: string): EpisodeRow | null {
    return this.state.episode(uuid);
  }
}
