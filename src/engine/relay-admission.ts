/**
 * Admission of relayed LLM calls: the Worker has checked a per-claim key's signature, and the
 * engine checks that its claim is still live and names the gateway and the trainer's key. The
 * Worker's claim gate (src/relay/claim-gate.ts) asks in batches (`sync`): the calls it admitted
 * from its cache, counted here, and where each claim stands; `admit` answers one call at a time.
 * Counts, activity and leases go through the tally of relay-activity.ts, written in one
 * transaction rather than a write per call.
 */
import type { ClaimKeyFields } from "../auth/claim-key";
import { isRolling } from "../protocol/status";
import { claimsLive } from "./rules";
import type { AgentChannel } from "./agent-channel";
import type { EngineStore } from "./engine-store";
import type { Episodes } from "./episodes";
import type { EpisodeRow } from "./episode-views";
import type { CaptureMode } from "../protocol/ledger";
import type { LedgerSettings } from "./ledger-settings";
import type { RetentionSchedule } from "./retention-schedule";
import { ACTIVITY_FLUSH_MS, RelayActivity } from "./relay-activity";
import { RelayBatches, type RelayBatchId } from "./relay-batches";
import { fail, ok, type Failure, type Reply } from "./reply";

/**
 * What every relayed call of the engine goes with: its gateway and the generation of the secret
 * its envelopes are signed with (engine-store.ts Meta.gatewayGeneration), and the ledger's
 * capture, weight version and run.
 */
export type EngineTerms = {
  gateway_url: string;
  gateway_generation: number;
  capture: CaptureMode;
  weight_version: number | null;
  run: number;
};
/** What a claim's calls go with: the trainer's key and URL for its episode, and who and what the ledger records them under. */
export type ClaimTerms = { trainer_api_key: string; trainer_base_url: string; client_uuid: string; task_id: string; episode_type: string };
/** The gateway and the trainer's key and URL, and what the ledger records the call under. */
export type Admission = EngineTerms & ClaimTerms;

/**
 * One claim in the Worker's batch: calls admitted from its cache, the last `idle_ms` ago, and
 * whether it needs the claim's terms. `carries`: the last of `calls` is the call being asked
 * about, which is no call if the answer is a hold. `batch`, on the first item of a batch that
 * carries calls: its id, the same when the batch is sent again (relay-batches.ts). On the item
 * rather than beside the list, so that the RPC keeps its one argument: whatever stands between
 * the gate and the engine (the route's move, a test's stand-in) passes the items on as they are,
 * and a Worker and an engine of different versions still understand each other mid-deploy.
 */
export type RelaySyncItem = { key: ClaimKeyFields; calls: number; idle_ms: number; detail: boolean; carries: boolean; batch?: RelayBatchId };
/** A live claim: how long its lease runs from now, and its terms when they were asked for (they never change for one claim). */
export type ClaimStanding = { lease_ms: number; terms: ClaimTerms | null };
/**
 * `engine` is null when no call can be admitted now: for want of a gateway (each live claim's
 * answer says so), or during a weight sync that keeps the claims (`hold` says what a call is told).
 */
export type RelaySyncAnswer = { engine: EngineTerms | null; hold: SyncHold | null; claims: Reply<ClaimStanding>[] };

/** What admission reads of an episode. */
type ClaimRow = Pick<EpisodeRow, "episode_uuid" | "state" | "fence" | "expires_at" | "discard_timeout" | "openai_api_key" | "openai_base_url" | "client_uuid" | "task_id" | "episode_type">;

const claimTerms = (ep: ClaimRow): ClaimTerms => ({
  trainer_api_key: ep.openai_api_key,
  trainer_base_url: ep.openai_base_url,
  client_uuid: ep.client_uuid,
  task_id: ep.task_id,
  episode_type: ep.episode_type,
});

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
  /** The Worker's batches applied lately: one sent again is answered, its calls not counted twice. */
  private readonly batches = new RelayBatches();
  private activityTimer: ReturnType<typeof setTimeout> | null = null;
  /** Calls admitted, and the requests that were answered (a refusal leaves no trace), since this object started. */
  private calls = 0;
  private requests = 0;

  constructor(
    private readonly store: EngineStore,
    private readonly episodes: Episodes,
    private readonly channel: AgentChannel,
    private readonly ledger: LedgerSettings,
    private readonly retention: RetentionSchedule,
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
    // A key of an engine deleted and made again is dead whatever the status (checked first, as always).
    const stale = this.store.meta.incarnation !== key.incarnation ? this.liveClaim(key) : null;
    if (stale !== null && !stale.ok) return stale;
    const refusal = this.engineRefusal();
    if (refusal !== null) return refusal;
    const ep = this.liveClaim(key);
    if (!ep.ok) return ep;
    const hold = this.syncHold();
    if (hold !== null) {
      this.requests++;
      return ok(hold);
    }
    const engine = this.engineTerms();
    if (!engine.ok) return engine;
    this.requests++;
    const now = this.host.now();
    this.activity.note(ep.body.episode_uuid, ep.body.fence, 1, now, now + Math.ceil(ep.body.discard_timeout * 1000));
    this.activityTimer ??= setTimeout(() => {
      this.activityTimer = null;
      try {
        this.settle();
      } catch (e) {
        // Kept in the tally (settle puts it back); the next read or alarm writes it.
        console.error("engine: writing LLM call activity failed", e);
      }
    }, ACTIVITY_FLUSH_MS);
    if (engine.body.capture !== "off") this.retention.noteUse("ledger", now);
    this.calls++;
    return ok({ ...engine.body, ...claimTerms(ep.body) });
  }

  /**
   * The Worker's batch (src/relay/claim-gate.ts): the calls it admitted from its cache since its last
   * batch, written now, and where each claim it asks about stands. One request for many calls
   * of many claims: the engine's work is per claim, not per call. A batch sent again (its
   * answer was lost) is answered as the first time, and its calls are not counted again.
   */
  sync(items: RelaySyncItem[]): Reply<RelaySyncAnswer> {
    const refusal = this.engineRefusal();
    if (refusal !== null) {
      // Calls the Worker served from its cache before the engine left ROLLING count all the same; a call the batch carries to ask is refused.
      const served = refusal.error === "engine_not_rolling" && !this.isRepeat(items) ? items.reduce((n, it) => n + it.calls - (it.carries ? 1 : 0), 0) : 0;
      if (served > 0) {
        this.calls += served;
        this.requests++;
      }
      return refusal;
    }
    const hold = this.syncHold();
    const engine = this.engineTerms();
    const now = this.host.now();
    // One statement for the batch's claims, not a query each: a refresh asks about every claim in use.
    const rows = this.claimRows(items);
    // Noted as applied before its calls go into the tally: a write that fails keeps them there.
    const repeat = this.isRepeat(items);
    let counted = false;
    let talliedOver = false;
    const live = items.map((it): Reply<{ ep: ClaimRow; expiresAt: number }> => {
      const ep = this.liveClaim(it.key, rows.get(it.key.episode_uuid) ?? null);
      // The calls the Worker counted were served from its cache while the claim lived, before any
      // hold, end or lost gateway: they count whatever stands now. The call a batch carries to ask
      // counts only if admitted now.
      const admitted = ep.ok && hold === null && engine.ok;
      const calls = repeat ? 0 : it.carries && !admitted ? it.calls - 1 : it.calls;
      if (!ep.ok) {
        // Over (ended, aborted, reaped, claimed again): counted, but no activity for a lease that is gone.
        this.calls += calls;
        talliedOver ||= calls > 0;
        return ep;
      }
      let expiresAt = ep.body.expires_at ?? now;
      if (calls > 0) {
        // The Worker says how long ago, not when: its clock is not this object's.
        const at = now - Math.max(0, it.idle_ms);
        const until = at + Math.ceil(ep.body.discard_timeout * 1000);
        this.activity.note(ep.body.episode_uuid, ep.body.fence, calls, at, until);
        expiresAt = Math.max(expiresAt, until);
        this.calls += calls;
        counted = true;
      }
      if (!engine.ok && hold === null) return engine;
      return ok({ ep: ep.body, expiresAt });
    });
    if (counted) this.settle();
    if (counted && engine.ok && engine.body.capture !== "off") this.retention.noteUse("ledger", now);
    const claims = live.map((r, i): Reply<ClaimStanding> => {
      if (!r.ok) return r;
      return ok({ lease_ms: Math.max(0, r.body.expiresAt - now), terms: items[i]?.detail ? claimTerms(r.body.ep) : null });
    });
    // A batch that admitted, counted or refreshed nothing was a refusal: it leaves no trace.
    if (counted || talliedOver || claims.some((c) => c.ok)) this.requests++;
    return ok({ engine: engine.ok && hold === null ? engine.body : null, hold, claims });
  }

  /** Whether the batch was applied before (its answer was lost): its calls are not counted again. Notes it applied. */
  private isRepeat(items: readonly RelaySyncItem[]): boolean {
    const id = items[0]?.batch;
    return id !== undefined && this.batches.repeat(id);
  }

  counts(): { calls: number; engine_requests: number } {
    return { calls: this.calls, engine_requests: this.requests };
  }

  /** Why this engine serves no call now (gone; not rolling, and not in a sync that keeps the claims), or null. */
  private engineRefusal(): Failure | null {
    const meta = this.store.meta;
    if (this.host.closed() || meta.name === null) return this.host.gone();
    if (!claimsLive(meta.status, meta.sync)) {
      return fail(503, "engine_not_rolling", `The engine is ${meta.status}: LLM calls are served only while ENGINE.ROLLING or ENGINE.ROLLING_POST.`);
    }
    return null;
  }

  /** During a weight sync that keeps the claims (the only time claims live outside ROLLING): what a held call is told. */
  private syncHold(): SyncHold | null {
    const meta = this.store.meta;
    if (isRolling(meta.status)) return null;
    return {
      hold: "weight_syncing",
      // The weights in use until the sync ends: a version reported with the sync is the one it
      // syncs to, and becomes the engine's only when it ends (status-and-rewards.ts).
      weight_version_before: meta.weightVersion,
      hold_seconds: meta.sync.sync_hold_seconds,
      retry_after_ms: SYNC_HOLD_RETRY_MS,
      syncing_since: meta.syncingSince,
    };
  }

  /** What every call of this engine is relayed with, or why none can be now. */
  private engineTerms(): Reply<EngineTerms> {
    const gateway = this.channel.gatewayUrl();
    if (gateway === null) {
      return fail(503, "no_gateway", "No inference gateway is registered for this engine: is the local-agent running with its gateway on?");
    }
    const meta = this.store.meta;
    return ok({ gateway_url: gateway, gateway_generation: meta.gatewayGeneration, capture: this.ledger.get().capture, weight_version: meta.weightVersion, run: meta.run });
  }

  /** The columns a batch reads of its claims' episodes, by episode. */
  private claimRows(items: RelaySyncItem[]): Map<string, ClaimRow> {
    const rows = new Map<string, ClaimRow>();
    const uuids = JSON.stringify(items.map((it) => it.key.episode_uuid));
    for (const r of this.store.sql.exec<ClaimRow>(
      `SELECT episode_uuid, state, fence, expires_at, discard_timeout, openai_api_key, openai_base_url, client_uuid, task_id, episode_type
       FROM episodes WHERE episode_uuid IN (SELECT value FROM json_each(?))`,
      uuids,
    )) {
      rows.set(r.episode_uuid, r);
    }
    return rows;
  }

  /** The claim a verified key names, if it is still the live claim of its episode (`row`: its episode, read already). */
  private liveClaim<R extends ClaimRow = EpisodeRow>(key: ClaimKeyFields, row?: R | null): Reply<R> {
    const meta = this.store.meta;
    if (meta.name !== key.engine) return this.host.gone();
    if (meta.incarnation !== key.incarnation) {
      return fail(401, "claim_not_live", "This key's claim is no longer live: it was made by an engine of this name that has been deleted.");
    }
    const ep = row === undefined ? (this.episodes.episode(key.episode_uuid) as R | null) : row;
    if (ep === null || ep.state !== "claimed" || ep.fence !== key.fence) {
      return fail(401, "claim_not_live", "This key's claim is no longer live: its episode was ended, aborted, reaped or claimed again.");
    }
    return ok(ep);
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
