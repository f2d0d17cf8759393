/**
 * Admission of relayed LLM calls: the Worker has checked a per-claim key's signature, and the
 * engine checks that its claim is still live and names the gateway and the trainer's key. Each
 * admitted call counts toward its claim and refreshes its lease (a client talking to the model
 * is not idle), through the tally of relay-activity.ts rather than a write per call.
 */
import type { ClaimKeyFields } from "../auth/claim-key";
import { isRolling } from "../protocol/status";
import { claimsLive } from "./rules";
import type { AgentChannel } from "./agent-channel";
import type { EngineStore } from "./engine-store";
import type { Episodes } from "./episodes";
import type { CaptureMode } from "../protocol/ledger";
import type { LedgerSettings } from "./ledger-settings";
import type { LedgerRetention } from "./ledger-retention";
import { ACTIVITY_FLUSH_MS, RelayActivity } from "./relay-activity";
import { fail, ok, type Failure, type Reply } from "./reply";

/** The gateway and the trainer's key and URL, and what the ledger records the call under. */
export type Admission = {
  gateway_url: string;
  trainer_api_key: string;
  trainer_base_url: string;
  capture: CaptureMode;
  client_uuid: string;
  task_id: string;
  weight_version: number | null;
  run: number;
};

/**
 * A call of a live claim that arrived during a weight sync the engine keeps its claims through
 * (keep_claims_across_sync): not admitted yet. The Worker holds it, asks again after
 * retry_after_ms, and gives up hold_seconds after the call arrived (503 sync_hold_expired);
 * once the sync is over the answer is an Admission, naming the new weights' version.
 */
export type SyncHold = {
  hold: "weight_syncing";
  /** The version of the weights being replaced: the call will not run on it. */
  weight_version_before: number | null;
  hold_seconds: number;
  retry_after_ms: number;
  /** When the sync began (ms since the epoch). */
  syncing_since: number | null;
};

/** How soon a held call asks again. */
export const SYNC_HOLD_RETRY_MS = 500;

export type AdmissionHost = {
  now(): number;
  tx<T>(fn: () => T): T;
  closed(): boolean;
  gone(): Failure;
};

export class RelayAdmission {
  /** LLM calls admitted but not yet written, and the timer that writes them. */
  private readonly activity = new RelayActivity();
  private activityTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(
    private readonly store: EngineStore,
    private readonly episodes: Episodes,
    private readonly channel: AgentChannel,
    private readonly ledger: LedgerSettings,
    private readonly retention: LedgerRetention,
    private readonly host: AdmissionHost,
  ) {}

  /**
   * admitOrHold for a Worker that cannot hold a call: a call that would be held is refused 503
   * weight_syncing, as any call outside ROLLING was before keep_claims_across_sync.
   */
  admit(key: ClaimKeyFields): Reply<Admission> {
    const r = this.admitOrHold(key);
    if (!r.ok) return r;
    if (!("hold" in r.body)) return ok(r.body);
    return fail(503, "weight_syncing", `The engine is syncing weights; this claim lives on, and the call can be made again once it ends (within ${r.body.hold_seconds} s).`);
  }

  /**
   * Admits a call of a live claim, or, during a weight sync that keeps the claims, answers that
   * it is to be held (SyncHold). Holding counts as no activity: the sync's time is given back
   * to the leases when it ends.
   */
  admitOrHold(key: ClaimKeyFields): Reply<Admission | SyncHold> {
    const meta = this.store.meta;
    if (this.host.closed() || meta.name === null || meta.name !== key.engine) return this.host.gone();
    if (meta.incarnation !== key.incarnation) {
      return fail(401, "claim_not_live", "This key's claim is no longer live: it was made by an engine of this name that has been deleted.");
    }
    if (!claimsLive(meta.status, meta.sync)) {
      return fail(503, "engine_not_rolling", `The engine is ${meta.status}: LLM calls are served only while ENGINE.ROLLING or ENGINE.ROLLING_POST.`);
    }
    const ep = this.episodes.episode(key.episode_uuid);
    if (ep === null || ep.state !== "claimed" || ep.fence !== key.fence) {
      return fail(401, "claim_not_live", "This key's claim is no longer live: its episode was ended, aborted, reaped or claimed again.");
    }
    if (!isRolling(meta.status)) {
      return ok({
        hold: "weight_syncing" as const,
        weight_version_before: meta.weightVersion,
        hold_seconds: meta.sync.sync_hold_seconds,
        retry_after_ms: SYNC_HOLD_RETRY_MS,
        syncing_since: meta.syncingSince,
      });
    }
    const gateway = this.channel.gatewayUrl();
    if (gateway === null) {
      return fail(503, "no_gateway", "No inference gateway is registered for this engine: is the local-agent running with its gateway on?");
    }
    const now = this.host.now();
    this.activity.note(ep.episode_uuid, ep.fence, now, now + Math.ceil(ep.discard_timeout * 1000));
    this.activityTimer ??= setTimeout(() => {
      this.activityTimer = null;
      try {
        this.settle();
      } catch (e) {
        // Kept in the tally (settle puts it back); the next read or alarm writes it.
        console.error("engine: writing LLM call activity failed", e);
      }
    }, ACTIVITY_FLUSH_MS);
    const capture = this.ledger.get().capture;
    if (capture !== "off") this.retention.noteUse(now);
    return ok({
      gateway_url: gateway,
      trainer_api_key: ep.openai_api_key,
      trainer_base_url: ep.openai_base_url,
      capture,
      client_uuid: ep.client_uuid,
      task_id: ep.task_id,
      weight_version: meta.weightVersion,
      run: meta.run,
    });
  }

  /** Writes the LLM calls admitted since the last write: counts, activity and lease, per live claim. */
  settle(): void {
    if (this.activity.size === 0) return;
    const items = this.activity.take();
    try {
      this.host.tx(() => {
        for (const a of items) {
          // A claim that ended or was superseded meanwhile keeps nothing of it.
          this.store.sql.exec(
            `UPDATE episodes SET llm_call_count = llm_call_count + ?, last_activity = MAX(last_activity, ?), expires_at = MAX(expires_at, ?)
             WHERE episode_uuid = ? AND fence = ? AND state = 'claimed'`,
            a.calls,
            a.at,
            a.expiresAt,
            a.episodeUuid,
            a.fence,
          );
        }
      });
    } catch (e) {
      this.activity.restore(items);
      throw e;
    }
  }
}
