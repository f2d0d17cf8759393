/**
 * Admission of relayed calls in the Worker, per isolate: what the engine answered about a claim
 * (live, its terms, its lease) is kept for a short while, and the calls admitted from it are
 * counted here and sent to the engine in batches (`relaySync`). An engine then does work per
 * claim and per second, not per call: on Cloudflare one Durable Object serves about a thousand
 * simple requests a second, shared with claims, ends and the agent.
 *
 * The bound: an answer is used for at most FRESH_MS after the batch that fetched it was sent.
 * A claim ended, aborted, reaped or claimed again, or an engine that leaves ROLLING or loses its
 * gateway, stops being served within FRESH_MS (1 s) in every isolate; in the isolate that
 * handled the end, the abort or the status change, at once (`forget`). Calls counted here reach
 * the engine within FLUSH_MS, and a call is served from the cache only while the claim's lease,
 * as the engine last said it, runs LEASE_MARGIN_MS longer: a client that keeps talking keeps its
 * lease, since its activity arrives before the reaper could judge it.
 *
 * A batch that carries calls has an id (this gate's, and a sequence number). Without an answer
 * to it (its request failed; a read will not wait for it) it is sent again under that id, with
 * the calls it had, never more: the engine counts a batch once however many copies reach it
 * (relay-batches.ts). A call that asked the engine and got no answer is refused, and is no call.
 * Answers can come back out of order: what one says of the whole engine (a sync, a refusal, the
 * gateway) is used only when no answer to a later request came first, and of a claim likewise.
 *
 * Only keys whose signature the Worker has verified come here: nothing forged reaches the engine.
 */
import type { ClaimKeyFields } from "../auth/claim-key";
import type { Admission, ClaimStanding, ClaimTerms, EngineTerms, RelaySyncAnswer, RelaySyncItem, SyncHold } from "../engine/relay-admission";
import { fail, ok, type Failure, type Reply } from "../engine/reply";

/** How long an answer of the engine is used, from when the batch that fetched it was sent. */
export const FRESH_MS = 1_000;
/** How often the claims in use are asked about again while calls come (the flush that carries their calls does it), before their answers go stale. */
export const REFRESH_AFTER_MS = 500;
/** A live claim called within this long is in use: the refreshes keep its answer fresh, so that even after a pause its next call finds it so. */
export const ACTIVE_MS = 30_000;
/** How long calls counted here wait for a batch to carry them. */
export const FLUSH_MS = 500;
/** A call is served from the cache only while the claim's lease runs at least this much longer. */
export const LEASE_MARGIN_MS = 2_000;
/** A flush on its way this long is taken for lost (its request cut off), and the next call arms another. */
export const FLUSH_STUCK_MS = 10_000;
/** A batch of calls with no answer is sent again after this long, twice as long each time the engine stays unreachable, up to RESEND_MAX_MS. */
export const RESEND_MS = 250;
export const RESEND_MAX_MS = 2_000;
/** A batch unanswered this long after it was first sent is given up: its calls are not counted, as an isolate's that went away. */
export const RESEND_FOR_MS = 60_000;
/** Claims without a call for this long are forgotten at the next batch. */
export const IDLE_MS = 60_000;
/** Claims kept per engine and isolate: past it, the oldest are forgotten (their next call asks the engine; their calls counted here go on to it). */
export const MAX_CLAIMS = 20_000;

/** The engine as the gate reaches it: one batch per call (the same batch may come again, under its id). */
export type GateEngine = (items: RelaySyncItem[]) => Promise<Reply<RelaySyncAnswer>>;
/** Time, injected in tests; `wait` lets a batch of counted calls go later without a request waiting for it. */
export type GateClock = { now(): number; wait(ms: number): Promise<void> };
/** Work that may outlive the request (the Worker's `ctx.waitUntil`). */
export type Background = (work: Promise<unknown>) => void;

export const realClock: GateClock = { now: () => Date.now(), wait: (ms) => new Promise((r) => setTimeout(r, ms)) };

type Entry = {
  key: ClaimKeyFields;
  /** The engine's last answer for the claim, and its terms once fetched (they never change for one claim). */
  standing: Reply<ClaimStanding> | null;
  terms: ClaimTerms | null;
  /** Until when `standing` may be used, and until when the lease runs as far as this isolate knows. */
  freshUntil: number;
  leaseUntil: number;
  /** When `standing` was fetched: a refresh is due REFRESH_AFTER_MS after it. */
  fetchedAt: number;
  /** Calls admitted from the cache and not yet sent, and when the last one was. */
  calls: number;
  lastCallAt: number;
  /** When a call last came, admitted or held through a weight sync: whether the claim is in use (ACTIVE_MS, IDLE_MS). */
  lastUsedAt: number;
  /** Bumped by `forget`: an answer to a batch sent before it is not used. */
  epoch: number;
  /** The request whose answer `standing` is (Request.no): an answer to an earlier request that comes later is not used. */
  answerNo: number;
  /** The refresh on its way that asks about this claim, and when it was sent. */
  inFlight: { sentAt: number; done: Promise<unknown> } | null;
};

/** What a batch's answer said: which claims' answers were taken, and of the engine, as the engine counted its calls. */
type Answer = { taken: boolean[]; hold: SyncHold | null; engine: EngineTerms | null; claims: Reply<ClaimStanding>[] };
/** The same for the claim a call asks about. */
type MustAnswer = { taken: boolean; hold: SyncHold | null; engine: EngineTerms | null; standing: Reply<ClaimStanding> | null };
/** What awaits a batch's answer: the first of its requests to be answered settles it for all. */
type Waiters = { promise: Promise<Reply<Answer>>; resolve(r: Reply<Answer>): void; reject(err: unknown): void };

/**
 * The claims of one batch and the calls it carries, as they were taken from the entries: sent
 * again, the same, until an answer comes. Calls counted later go in a later batch.
 */
type Batch = {
  /** Its sequence number in the gate; 0 for a batch without calls, which is never sent again. */
  seq: number;
  entries: Entry[];
  /** Per entry: the calls taken, and when the last of them came. */
  counts: number[];
  lastCallAt: number[];
  calls: number;
  /** The entry whose last call is the call being asked about (-1: none): no call if the answer is a hold or none comes. */
  carried: number;
  /** When that entry's call before the carried one came: its last call's time again, if the carried one is refused. */
  beforeCarried: number;
  firstSentAt: number;
  lastSentAt: number;
  /** Its requests on their way, and what awaits the answer of the first to come back (null while none is on its way). */
  copies: number;
  waiters: Waiters | null;
  answered: boolean;
};

/** One request of a batch: what its answer is checked against (the gate's order of requests, and `forget`). */
type Request = { no: number; sentAt: number; epoch: number; epochs: number[] };

function waiters(): Waiters {
  let resolve: (r: Reply<Answer>) => void = () => {};
  let reject: (err: unknown) => void = () => {};
  const promise = new Promise<Reply<Answer>>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

const claimId = (k: ClaimKeyFields): string => `${k.episode_uuid}\n${k.fence}\n${k.incarnation}`;

const UNREACHABLE = fail(503, "engine_unreachable", "The engine could not be reached to admit this call; try again.");
const UNSETTLED = fail(503, "admission_unsettled", "The engine's answers for this claim kept being overtaken by changes to it; try again.");

/** One engine's claims in one isolate. */
export class ClaimGate {
  private readonly entries = new Map<string, Entry>();
  /** The entries by episode: an end or a claim handled in this isolate forgets its episode without a walk of every claim. */
  private readonly byEpisode = new Map<string, Set<Entry>>();
  private engineTerms: EngineTerms | null = null;
  /** Why the engine serves no call now (not rolling, no gateway, gone), and until when that answer is used. */
  private refusal: Failure | null = null;
  private refusalUntil = 0;
  /** The engine is in a weight sync that keeps its claims: calls of live claims wait (SyncHold), until when that answer is used. */
  private held: SyncHold | null = null;
  private heldUntil = 0;
  /** Bumped by `forget()`: an older batch's word on the whole engine is not used. */
  private epoch = 0;
  /** The refresh on its way, while there is one: a refresh whose request was cut off is given up after FLUSH_STUCK_MS. */
  private refreshing: object | null = null;
  /** When the last refresh was sent. */
  private refreshedAt = Number.NEGATIVE_INFINITY;
  /** The flush on its way (its wait, then its request), while there is one, and when it was armed. */
  private flushing: Promise<void> | null = null;
  private flushArmedAt = 0;
  /** Whether that flush's request has gone: calls counted since are not in it. */
  private flushSent = false;
  /** When that flush's request goes, and what sends it sooner (a resend backed off, then calls counted). */
  private flushDueAt = 0;
  private flushSooner: (() => void) | null = null;
  /** A call counted after that request went has armed the next flush, for when that one is done. */
  private flushOwed = false;
  /** Calls counted in entries and not yet sent: a read's flush with none to send costs no walk of the entries. */
  private pending = 0;
  /** This gate's part of its batches' ids, and the last batch's sequence number. */
  private readonly id = crypto.randomUUID();
  private seq = 0;
  /** The batches with calls that have no answer yet, by sequence number (so in the order they were made). */
  private readonly unanswered = new Map<number, Batch>();
  /** Requests made (Request.no), and the one whose answer the gate's word on the whole engine is. */
  private requests = 0;
  private engineAnswerNo = 0;
  /** How long the next resend waits (0: the last request was answered). */
  private resendMs = 0;

  constructor(
    private readonly engine: GateEngine,
    private readonly clock: GateClock = realClock,
    /** Claims kept (MAX_CLAIMS; a test makes room sooner). */
    private readonly maxClaims = MAX_CLAIMS,
  ) {}

  /** Admits one call of a verified key: from the cache while the engine's answer is fresh, else by asking the engine. */
  async admit(key: ClaimKeyFields, background: Background): Promise<Reply<Admission | SyncHold>> {
    const id = claimId(key);
    const e = this.entries.get(id) ?? this.add(id, key, background);
    for (let attempt = 0; attempt < 3; attempt++) {
      const now = this.clock.now();
      if (this.refusal !== null && now < this.refusalUntil) return this.refusal;
      e.lastUsedAt = now;
      if (this.usable(e, now)) return this.heldNow(e, now) ?? this.fromCache(e, now, background);
      const refreshDue = this.refreshDue(now, REFRESH_AFTER_MS);
      const waited = e.inFlight;
      if (waited !== null && now - waited.sentAt < FRESH_MS) {
        // A refresh already asks about this claim: its answer is as good as one asked for now (sent
        // within FRESH_MS of this call), and waiting for it spares the engine a request per stale call.
        await Promise.race([waited.done, this.clock.wait(FRESH_MS)]);
        const later = this.clock.now();
        // Only while it is fresh: waited for up to FRESH_MS, it may not be any more, and then the call asks itself.
        if (e.fetchedAt === waited.sentAt && this.usable(e, later)) return this.heldNow(e, waited.sentAt) ?? this.fromCache(e, later, background);
        continue;
      }
      // Asked now, the call goes with the question: its activity is written before the answer
      // comes. A refresh that is due asks about it with every other claim in use, in one request.
      // Not while the engine was last seen holding calls: a held call is not one, and is counted when admitted.
      const carried = this.held === null;
      const before = e.lastCallAt;
      if (carried) {
        e.calls++;
        this.pending++;
        e.lastCallAt = now;
      }
      let r: Reply<MustAnswer>;
      try {
        r = await this.batch(refreshDue, e, carried ? before : undefined);
      } catch (err) {
        // No answer: the call is refused, so it was no call (the batch took it out); the batch's other calls go again.
        console.error("relay: asking the engine about a claim failed", err);
        this.flushAgain(background);
        return UNREACHABLE;
      }
      if (!r.ok) return r;
      if (r.body.taken) return this.answered(e, carried, r.body, background);
      // Overtaken by a forget: the call was sent (and counted if carried and the claim was live); ask again without it.
      return this.recheck(e, carried, background);
    }
    return UNSETTLED;
  }

  /**
   * A call of `key` admitted from the cache, or refused from it, now; null when admitting it
   * means waiting (on the engine, or through a weight sync), which `admitThroughSync` does. The
   * same answer as admit's first look, without its promises: most calls end here.
   */
  admitCached(key: ClaimKeyFields, background: Background): Reply<Admission> | null {
    const e = this.entries.get(claimId(key));
    if (e === undefined) return null;
    const now = this.clock.now();
    if (this.refusal !== null && now < this.refusalUntil) return this.refusal;
    if (!this.usable(e, now) || this.heldNow(e, now) !== null) return null;
    return this.fromCache(e, now, background);
  }

  /**
   * admit, holding a call through a weight sync that keeps the claims (keep_claims_across_sync):
   * asked again every retry_after_ms until the sync is over, then admitted on the new weights;
   * 503 sync_hold_expired once the engine's sync_hold_seconds have passed since the call came.
   */
  async admitThroughSync(key: ClaimKeyFields, background: Background): Promise<Reply<Admission>> {
    const arrived = this.clock.now();
    for (;;) {
      const r = await this.admit(key, background);
      if (!r.ok || !("hold" in r.body)) return r as Reply<Admission>;
      const left = arrived + r.body.hold_seconds * 1000 - this.clock.now();
      if (left <= 0) {
        return fail(503, "sync_hold_expired", `The engine has been syncing weights for longer than a call waits (sync_hold_seconds: ${r.body.hold_seconds}); the claim lives on (until the sync outlasts its lease by max_sync_seconds): call again.`);
      }
      await this.clock.wait(Math.min(r.body.retry_after_ms, left));
    }
  }

  /** The hold a live claim's call gets now, if the engine's last word (at `asOf`) was that it syncs weights keeping its claims. */
  private heldNow(e: Entry, asOf: number): Reply<SyncHold> | null {
    if (this.held === null || asOf >= this.heldUntil || e.standing?.ok !== true) return null;
    return ok(this.held);
  }

  /** After an answer `forget` overtook: asks about the claim alone until an answer holds (`carried`: the call went with the first question). */
  private async recheck(e: Entry, carried: boolean, background: Background): Promise<Reply<Admission | SyncHold>> {
    for (let attempt = 0; attempt < 2; attempt++) {
      let r: Reply<MustAnswer>;
      try {
        r = await this.batch(false, e);
      } catch {
        this.flushAgain(background);
        return UNREACHABLE;
      }
      if (!r.ok) return r;
      if (r.body.taken) return this.answered(e, carried, r.body, background);
    }
    return UNSETTLED;
  }

  /**
   * A call's answer once the engine's answer about its claim came: a refusal, a hold, or an
   * admission (counted here unless it went with the question). What `answer` said of the
   * engine decides, though a later answer may have come first: the engine counted a carried
   * call, or held it, by it.
   */
  private answered(e: Entry, carried: boolean, answer: MustAnswer, background: Background): Reply<Admission | SyncHold> {
    const standing = e.standing as Reply<ClaimStanding>;
    if (!standing.ok) return standing;
    if (answer.hold !== null) return ok(answer.hold);
    if (carried) {
      // The engine counted the call, or refused it, by its own answer to this request, though a
      // later one stands: a refusal it gave this call stands for the call too.
      if (answer.standing !== null && !answer.standing.ok) return answer.standing;
      return answer.engine === null ? UNSETTLED : this.admission(e, answer.engine);
    }
    const now = this.clock.now();
    // Not asked with this call: admitted as from the cache, on the gate's latest word on the engine.
    return this.heldNow(e, now) ?? (this.engineTerms === null ? UNSETTLED : this.fromCache(e, now, background));
  }

  /** Stops using what the engine said of one episode's claims (ended, aborted, claimed again), or of the engine and all its claims. */
  forget(episodeUuid?: string): void {
    if (episodeUuid === undefined) {
      this.epoch++;
      this.refusal = null;
      this.held = null;
    }
    for (const e of episodeUuid === undefined ? this.entries.values() : (this.byEpisode.get(episodeUuid) ?? [])) {
      e.epoch++;
      e.freshUntil = 0;
    }
  }

  /** The gateway the engine's last answer named (null before any): a heartbeat that names another makes the gate forget. */
  get gatewayUrl(): string | null {
    return this.engineTerms?.gateway_url ?? null;
  }

  /** Whether a call of `key` would be admitted from the cache now, for tests and diagnostics. */
  cached(key: ClaimKeyFields): boolean {
    const e = this.entries.get(claimId(key));
    return e !== undefined && this.usable(e, this.clock.now());
  }

  /** Claims kept, for tests and diagnostics. */
  get size(): number {
    return this.entries.size;
  }

  /**
   * Before a read in this isolate: sends the counted calls now, and again the batches of calls
   * still on their way (under their ids: the engine counts whichever copy comes first), and
   * returns once the engine has them all, or could not be reached.
   */
  async flush(): Promise<void> {
    if (this.pending === 0 && this.unanswered.size === 0) return;
    await this.send(true);
  }

  /**
   * The counted calls go in one batch; past half the way to the next refresh, it is that
   * refresh: one request carries the counts and asks about every claim in use, never two going
   * apart. The batches that got no answer go again beside it (`onTheWay`: those still waiting
   * for theirs too), and those unanswered RESEND_FOR_MS are given up.
   */
  private async send(onTheWay: boolean): Promise<void> {
    const now = this.clock.now();
    const work: Promise<unknown>[] = [];
    for (const b of this.unanswered.values()) {
      if (now - b.firstSentAt >= RESEND_FOR_MS) {
        console.error(`relay: gave up sending ${b.calls} counted calls to the engine`);
        this.unanswered.delete(b.seq);
      } else if (onTheWay || b.copies === 0 || now - b.lastSentAt >= FLUSH_STUCK_MS) {
        work.push(this.post(b));
      }
    }
    if (this.pending > 0) work.push(this.batch(this.refreshDue(now, REFRESH_AFTER_MS / 2)));
    await Promise.all(work.map((w) => w.catch((err: unknown) => console.error("relay: sending counted calls to the engine failed", err))));
  }

  /** Whether a batch now may be a refresh: none on its way (or one lost), and `after` since the last. */
  private refreshDue(now: number, after: number): boolean {
    return (this.refreshing === null || now - this.refreshedAt >= FLUSH_STUCK_MS) && now - this.refreshedAt >= after;
  }

  private admission(e: Entry, engine = this.engineTerms): Reply<Admission> {
    // Both are set by the answer that made `e` usable.
    return ok({ ...(engine as EngineTerms), ...(e.terms as ClaimTerms) });
  }

  /** A call admitted on the engine's last answer: counted here, sent within FLUSH_MS (with the refresh then due). */
  private fromCache(e: Entry, now: number, background: Background): Reply<Admission> {
    const standing = e.standing as Reply<ClaimStanding>;
    if (!standing.ok) return standing;
    e.calls++;
    this.pending++;
    e.lastCallAt = now;
    e.lastUsedAt = now;
    this.scheduleFlush(background, now);
    return this.admission(e);
  }

  /** Whether `e`'s answer may admit a call at `now`: fresh (until `freshUntil`), and for a live claim with lease to spare. */
  private usable(e: Entry, now: number, freshUntil = e.freshUntil): boolean {
    if (e.standing === null || now >= freshUntil) return false;
    // A live claim's calls need the engine's terms, which an answer during a sync does not give.
    if (e.standing.ok && this.engineTerms === null && this.heldNow(e, now) === null) return false;
    // A dead claim's answer holds while fresh; a live one's only while its lease has margin.
    return !e.standing.ok || now + LEASE_MARGIN_MS < e.leaseUntil;
  }

  private add(id: string, key: ClaimKeyFields, background: Background): Entry {
    if (this.entries.size >= this.maxClaims) {
      const oldest = this.entries.entries().next();
      if (!oldest.done) {
        const [oldId, old] = oldest.value;
        // Its calls were relayed: they go to the engine in a batch of their own, as one that got no answer would.
        if (old.calls > 0) {
          this.take([old], undefined, 0, this.clock.now());
          this.flushAgain(background);
        }
        this.remove(oldId);
      }
    }
    const e: Entry = { key, standing: null, terms: null, freshUntil: 0, leaseUntil: 0, fetchedAt: 0, calls: 0, lastCallAt: 0, lastUsedAt: 0, epoch: 0, answerNo: 0, inFlight: null };
    this.entries.set(id, e);
    const same = this.byEpisode.get(key.episode_uuid);
    if (same === undefined) this.byEpisode.set(key.episode_uuid, new Set([e]));
    else same.add(e);
    return e;
  }

  private remove(id: string): void {
    const e = this.entries.get(id);
    if (e === undefined) return;
    this.entries.delete(id);
    const same = this.byEpisode.get(e.key.episode_uuid);
    same?.delete(e);
    if (same?.size === 0) this.byEpisode.delete(e.key.episode_uuid);
  }

  /**
   * The calls counted here go to the engine within FLUSH_MS, in the refresh then due: while
   * calls come, this timer is what refreshes the claims in use, one request each FLUSH_MS for
   * both. Calls counted while it waits go with it; calls counted once its request has gone go
   * with the next, which the first of them arms in its own request once that one is done, or
   * send themselves FLUSH_MS after they were counted if its answer is that slow. A
   * request's background work ends with it (on Cloudflare, 30 s after its answer), so no one
   * request carries the flushes for long, and a flush that never ended (its request cut off)
   * is given up after FLUSH_STUCK_MS. A batch that got no answer is sent again by a flush
   * armed at once, after RESEND_MS and longer while the engine stays unreachable (`resend`).
   */
  private scheduleFlush(background: Background, now: number, resend = false): void {
    if (this.flushing !== null && now - this.flushArmedAt < FLUSH_STUCK_MS) {
      if (!this.flushSent && !resend && this.flushDueAt > now + FLUSH_MS) {
        // A resend backed off (up to RESEND_MAX_MS) carries these calls too: it goes within FLUSH_MS of them.
        this.flushDueAt = now + FLUSH_MS;
        const sooner = this.flushSooner;
        background(this.clock.wait(FLUSH_MS).then(() => sooner?.()));
      }
      if (this.flushSent && !this.flushOwed) {
        this.flushOwed = true;
        const answered = this.flushing.then(() => true);
        background(
          Promise.race([answered, this.clock.wait(FLUSH_MS).then(() => false)]).then(async (done) => {
            this.flushOwed = false;
            if (done) return this.flushAgain(background);
            // That flush's answer is slow: these calls go now, beside it, so that their activity
            // reaches the engine within FLUSH_MS, before the reaper could judge a lease they keep.
            if (this.pending > 0) await this.send(false);
          }),
        );
      }
      return;
    }
    this.flushSent = false;
    this.flushOwed = false;
    this.flushArmedAt = now;
    const wait = resend ? this.backOff() : FLUSH_MS;
    this.flushDueAt = now + wait;
    const sooner = new Promise<void>((resolve) => (this.flushSooner = resolve));
    const flushing: Promise<void> = Promise.race([this.clock.wait(wait), sooner])
      .then(() => {
        if (this.flushing === flushing) this.flushSent = true;
        return this.send(false);
      })
      .finally(() => {
        if (this.flushing !== flushing) return;
        this.flushing = null;
        this.flushSent = false;
        // Calls counted meanwhile wait for the flush their own request arms; a batch this one could not send goes again from here.
        if (this.owesResend()) this.scheduleFlush(background, this.clock.now(), true);
      });
    this.flushing = flushing;
    background(flushing);
  }

  /** After a flush, or a call whose question got no answer: batches without an answer go again soon, calls counted since within FLUSH_MS. */
  private flushAgain(background: Background): void {
    if (this.owesResend()) this.scheduleFlush(background, this.clock.now(), true);
    else if (this.pending > 0) this.scheduleFlush(background, this.clock.now());
  }

  /** Whether a batch of calls has no answer and no request on its way. */
  private owesResend(): boolean {
    for (const b of this.unanswered.values()) if (b.copies === 0) return true;
    return false;
  }

  /** The wait before the next resend: RESEND_MS, doubled while the engine stays unreachable, at most RESEND_MAX_MS. */
  private backOff(): number {
    this.resendMs = Math.min(RESEND_MAX_MS, Math.max(RESEND_MS, this.resendMs * 2));
    return this.resendMs;
  }

  /**
   * One batch to the engine: the claims with counted calls, `must`, and for a refresh every
   * claim in use (`beforeCarried`, when the last call of `must` is the call asking: when the call
   * of `must` before it came). Answers what the engine said, and whether `must`'s answer was
   * taken. Forgets claims long unused.
   */
  private async batch(refresh: boolean, must?: Entry, beforeCarried?: number): Promise<Reply<MustAnswer>> {
    const now = this.clock.now();
    const chosen: Entry[] = [];
    for (const [id, e] of this.entries) {
      if (e === must || e.calls > 0 || (refresh && e.standing?.ok !== false && now - e.lastUsedAt <= ACTIVE_MS)) chosen.push(e);
      else if (now - e.lastUsedAt > IDLE_MS && now - e.fetchedAt > IDLE_MS) this.remove(id);
    }
    if (must !== undefined && !chosen.includes(must)) chosen.push(must);
    if (chosen.length === 0) return ok({ taken: false, hold: null, engine: null, standing: null });
    const sending = this.post(this.take(chosen, beforeCarried === undefined ? undefined : must, beforeCarried ?? 0, now));
    const refreshing = refresh ? {} : null;
    if (refresh) {
      this.refreshing = refreshing;
      this.refreshedAt = now;
      const inFlight = { sentAt: now, done: sending.catch(() => undefined) };
      for (const e of chosen) e.inFlight = inFlight;
    }
    try {
      const r = await sending;
      if (!r.ok) return r;
      const at = must === undefined ? -1 : chosen.indexOf(must);
      return ok({ taken: must === undefined || (r.body.taken[at] ?? false), hold: r.body.hold, engine: r.body.engine, standing: r.body.claims[at] ?? null });
    } finally {
      if (refresh) {
        if (this.refreshing === refreshing) this.refreshing = null;
        for (const e of chosen) if (e.inFlight?.sentAt === now) e.inFlight = null;
      }
    }
  }

  /** A batch of these claims: their counted calls move from the entries into it, to be sent (again if need be) as they are now. */
  private take(chosen: Entry[], carried: Entry | undefined, beforeCarried: number, now: number): Batch {
    const counts = chosen.map((e) => e.calls);
    const lastCallAt = chosen.map((e) => e.lastCallAt);
    let calls = 0;
    for (const e of chosen) {
      calls += e.calls;
      e.calls = 0;
    }
    this.pending -= calls;
    const seq = calls > 0 ? ++this.seq : 0;
    const b: Batch = { seq, entries: chosen, counts, lastCallAt, calls, carried: carried === undefined ? -1 : chosen.indexOf(carried), beforeCarried, firstSentAt: now, lastSentAt: now, copies: 0, waiters: null, answered: false };
    if (seq > 0) this.unanswered.set(seq, b);
    return b;
  }

  /**
   * One request of batch `b`: its calls go, its claims' answers come back. A batch already on
   * its way is sent again by a read's flush; the first answer settles it for every caller, and
   * when every request of it failed they all hear of it, and it waits for a resend. (The first
   * answer may be to the copy the engine took for a repeat: should a weight sync begin or end
   * between the two copies, the call a question carried is held though counted, or admitted
   * though not; that takes a read, a question on its way and a status change at once.)
   */
  private post(b: Batch): Promise<Reply<Answer>> {
    const waiting = (b.waiters ??= waiters());
    const sentAt = this.clock.now();
    const request: Request = { no: ++this.requests, sentAt, epoch: this.epoch, epochs: b.entries.map((e) => e.epoch) };
    b.copies++;
    b.lastSentAt = sentAt;
    let reply: Promise<Reply<RelaySyncAnswer>>;
    try {
      reply = this.engine(this.items(b, sentAt));
    } catch (err) {
      reply = Promise.reject(err);
    }
    reply.then(
      (r) => {
        b.copies--;
        if (b.answered) return;
        b.answered = true;
        this.unanswered.delete(b.seq);
        this.resendMs = 0;
        waiting.resolve(this.answer(b, r, request));
      },
      (err: unknown) => {
        b.copies--;
        if (b.answered || b.copies > 0) return;
        b.waiters = null;
        this.lost(b);
        waiting.reject(err);
      },
    );
    return waiting.promise;
  }

  /** The items of a request of `b` sent at `sentAt`: its counts as taken, how long ago their last call was as of now. */
  private items(b: Batch, sentAt: number): RelaySyncItem[] {
    const items = b.entries.map((e, i): RelaySyncItem => {
      const calls = b.counts[i] ?? 0;
      return { key: e.key, calls, idle_ms: calls > 0 ? sentAt - (b.lastCallAt[i] ?? sentAt) : 0, detail: e.terms === null, carries: i === b.carried };
    });
    const first = items[0];
    if (b.seq > 0 && first !== undefined) {
      // Every batch below the oldest unanswered one is settled: the engine forgets their ids.
      const settled = this.unanswered.keys().next().value ?? b.seq;
      first.batch = { gate: this.id, seq: b.seq, settled };
    }
    return items;
  }

  /**
   * Every request of `b` failed: the call it asked about, if any, is refused (its caller answers
   * 503), so it is no call and goes no more; the batch's other calls wait for a resend.
   */
  private lost(b: Batch): void {
    if (b.carried >= 0) {
      b.counts[b.carried] = (b.counts[b.carried] ?? 1) - 1;
      // Its activity goes with it: the claim's last call is the one before it.
      b.lastCallAt[b.carried] = b.beforeCarried;
      b.calls--;
      b.carried = -1;
    }
    if (b.calls === 0) this.unanswered.delete(b.seq);
  }

  /**
   * The engine's answer to a request of `b`, taken where it is the latest: of the whole engine
   * when no answer to a later request was taken first, of a claim likewise, and neither across
   * a `forget`. Answers whether each claim has an answer at least this new (none across a `forget`).
   */
  private answer(b: Batch, reply: Reply<RelaySyncAnswer>, request: Request): Reply<Answer> {
    const engineWide = request.epoch === this.epoch && request.no > this.engineAnswerNo;
    if (engineWide) this.engineAnswerNo = request.no;
    if (!reply.ok) {
      // The engine serves no call now, and wrote none of these: kept as the answer for all, FRESH_MS.
      if (engineWide) {
        this.refusal = reply;
        this.refusalUntil = request.sentAt + FRESH_MS;
        for (const e of this.entries.values()) e.freshUntil = 0;
      }
      return reply;
    }
    if (engineWide) {
      this.refusal = null;
      this.held = reply.body.hold;
      this.heldUntil = request.sentAt + FRESH_MS;
      if (reply.body.engine !== null) this.engineTerms = reply.body.engine;
    }
    const taken = b.entries.map((e, i) => {
      const standing = reply.body.claims[i] ?? fail(500, "relay_sync", "The engine answered fewer claims than it was asked about.");
      if (standing.ok && standing.body.terms !== null) e.terms = standing.body.terms;
      if (e.epoch !== request.epochs[i] || request.epoch !== this.epoch) return false;
      // A later request's answer came first: it stands, as good for a call that waited on this one.
      if (request.no < e.answerNo) return true;
      e.answerNo = request.no;
      e.standing = standing;
      e.fetchedAt = request.sentAt;
      e.freshUntil = request.sentAt + FRESH_MS;
      e.leaseUntil = standing.ok ? request.sentAt + standing.body.lease_ms : 0;
      return true;
    });
    return ok({ taken, hold: reply.body.hold, engine: reply.body.engine, claims: reply.body.claims });
  }
}
