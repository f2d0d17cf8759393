/**
 * Admission of relayed LLM calls: the Worker has checked a per-claim key's signature, and the
 * engine checks that its claim is still live and names the gateway and the trainer's key. Each
 * admitted call counts toward its claim and refreshes its lease (a client talking to the model
 * is not idle), through the tally of relay-activity.ts rather than a write per call.
 */
import type { ClaimKeyFields } from "../auth/claim-key";
import { isRolling } from "../protocol/status";
import type { AgentChannel } from "./agent-channel";
import type { EngineStore } from "./engine-store";
import type { Episodes } from "./episodes";
import type { EpisodeRow } from "./episode-views";
import type { CaptureMode } from "../protocol/ledger";
import type { LedgerSettings } from "./ledger-settings";
import type { LedgerRetention } from "./ledger-retention";
import { ACTIVITY_FLUSH_MS, RelayActivity } from "./relay-activity";
import { fail, ok, type Failure, type Reply } from "./reply";

/** What every relayed call of the engine goes with: its gateway, and the ledger's capture, weight version and run. */
export type EngineTerms = {
  gateway_url: string;
  capture: CaptureMode;
  weight_version: number | null;
  run: number;
};
/** What a claim's calls go with: the trainer's key and URL for its episode, and who and what the ledger records them under. */
export type ClaimTerms = { trainer_api_key: string; trainer_base_url: string; client_uuid: string; task_id: string };
/** The gateway and the trainer's key and URL, and what the ledger records the call under. */
export type Admission = EngineTerms & ClaimTerms;

/** One claim in the Worker's batch: calls admitted from its cache, the last `idle_ms` ago, and whether it needs the claim's terms. */
export type RelaySyncItem = { key: ClaimKeyFields; calls: number; idle_ms: number; detail: boolean };
/** A live claim: how long its lease runs from now, and its terms when they were asked for (they never change for one claim). */
export type ClaimStanding = { lease_ms: number; terms: ClaimTerms | null };
/** `engine` is null when no claim can be served for want of a gateway (each live claim's answer says so). */
export type RelaySyncAnswer = { engine: EngineTerms | null; claims: Reply<ClaimStanding>[] };

const claimTerms = (ep: EpisodeRow): ClaimTerms => ({
  trainer_api_key: ep.openai_api_key,
  trainer_base_url: ep.openai_base_url,
  client_uuid: ep.client_uuid,
  task_id: ep.task_id,
});

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
  /** Calls admitted, and the requests that brought them, since this object started. */
  private calls = 0;
  private requests = 0;

  constructor(
    private readonly store: EngineStore,
    private readonly episodes: Episodes,
    private readonly channel: AgentChannel,
    private readonly ledger: LedgerSettings,
    private readonly retention: LedgerRetention,
    private readonly host: AdmissionHost,
  ) {}

  admit(key: ClaimKeyFields): Reply<Admission> {
    this.requests++;
    const refusal = this.engineRefusal();
    if (refusal !== null) return refusal;
    const ep = this.liveClaim(key);
    if (!ep.ok) return ep;
    const engine = this.engineTerms();
    if (!engine.ok) return engine;
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
    if (engine.body.capture !== "off") this.retention.noteUse(now);
    this.calls++;
    return ok({ ...engine.body, ...claimTerms(ep.body) });
  }

  /**
   * The Worker's batch (relay-sync.ts): the calls it admitted from its cache since its last
   * batch, written now, and where each claim it asks about stands. One request for many calls
   * of many claims: the engine's work is per claim, not per call.
   */
  sync(items: RelaySyncItem[]): Reply<RelaySyncAnswer> {
    this.requests++;
    const refusal = this.engineRefusal();
    if (refusal !== null) return refusal;
    const engine = this.engineTerms();
    const now = this.host.now();
    let counted = false;
    const live = items.map((it): Reply<EpisodeRow> => {
      const ep = this.liveClaim(it.key);
      if (!ep.ok) return ep;
      if (!engine.ok) return engine;
      if (it.calls > 0) {
        // The Worker says how long ago, not when: its clock is not this object's.
        const at = now - Math.max(0, it.idle_ms);
        this.activity.note(ep.body.episode_uuid, ep.body.fence, it.calls, at, at + Math.ceil(ep.body.discard_timeout * 1000));
        this.calls += it.calls;
        counted = true;
      }
      return ep;
    });
    if (counted) this.settle();
    if (counted && engine.ok && engine.body.capture !== "off") this.retention.noteUse(now);
    const claims = live.map((ep, i): Reply<ClaimStanding> => {
      if (!ep.ok) return ep;
      const expiresAt = this.episodes.episode(ep.body.episode_uuid)?.expires_at ?? now;
      return ok({ lease_ms: Math.max(0, expiresAt - now), terms: items[i]?.detail ? claimTerms(ep.body) : null });
    });
    return ok({ engine: engine.ok ? engine.body : null, claims });
  }

  counts(): { calls: number; engine_requests: number } {
    return { calls: this.calls, engine_requests: this.requests };
  }

  /** Why this engine serves no call now (gone, not rolling), or null. */
  private engineRefusal(): Failure | null {
    const meta = this.store.meta;
    if (this.host.closed() || meta.name === null) return this.host.gone();
    if (!isRolling(meta.status)) {
      return fail(503, "engine_not_rolling", `The engine is ${meta.status}: LLM calls are served only while ENGINE.ROLLING or ENGINE.ROLLING_POST.`);
    }
    return null;
  }

  /** What every call of this engine is relayed with, or why none can be now. */
  private engineTerms(): Reply<EngineTerms> {
    const gateway = this.channel.gatewayUrl();
    if (gateway === null) {
      return fail(503, "no_gateway", "No inference gateway is registered for this engine: is the local-agent running with its gateway on?");
    }
    const meta = this.store.meta;
    return ok({ gateway_url: gateway, capture: this.ledger.get().capture, weight_version: meta.weightVersion, run: meta.run });
  }

  /** The claim a verified key names, if it is still the live claim of its episode. */
  private liveClaim(key: ClaimKeyFields): Reply<EpisodeRow> {
    const meta = this.store.meta;
    if (meta.name !== key.engine) return this.host.gone();
    if (meta.incarnation !== key.incarnation) {
      return fail(401, "claim_not_live", "This key's claim is no longer live: it was made by an engine of this name that has been deleted.");
    }
    const ep = this.episodes.episode(key.episode_uuid);
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
