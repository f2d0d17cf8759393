/**
 * Sends recorded calls to the exchange (POST <engine>/agent/calls) in batches: up to
 * MAX_CALLS_PER_BATCH calls, about 1.5 MB of JSON, or what came within a second, whichever is
 * first. A batch keeps its id on every resend, so the exchange records it once. Network errors,
 * 5xx, 408 and 429 are retried with backoff (a Retry-After is honoured); any other refusal is
 * logged and its batch dropped, since sending it again would be refused again. A batch refused
 * for what it holds (413, 422) is sent again in halves first, so that one call the exchange will
 * not take (a field over its limit) costs that call, not the 499 sent with it. The queue is
 * bounded in bytes and drops its oldest calls when full: the ledger must never hold the agent's
 * memory hostage to an exchange that is down.
 *
 * The media a batch's records refer to (media.ts) are uploaded before it (PUT
 * <engine>/agent/media/<sha256>), each once a UTC day: the exchange keeps a medium under the day
 * it stores the batches naming it, and refuses a batch (409 media_missing) whose day does not
 * hold one, which then uploads them all again (the exchange's day may turn before the gateway's).
 * An exchange older than media answers the upload 404 `not_found` (no such route): the agent was
 * upgraded before its Worker. Its batches then go without their media, the references left
 * dangling, rather than be dropped with their tokens; the route is tried again after a while.
 */
import { randomUUID } from "node:crypto";
import { ExchangeError, UNREADABLE_ANSWER } from "../../../src/client";
import type { AgentLedgerReport } from "../../../src/protocol/agent";
import { MAX_CALLS_PER_BATCH, type CallBatch, type CallBatchResponse, type CallRecord } from "../../../src/protocol/ledger";
import { Backoff, type BackoffOptions } from "../backoff";
import type { Clock } from "../clock";
import { describeError, type Logger } from "../log";
import { mediaRef, missingMediaRef } from "../../../src/ledger/media-refs";
import { NO_MEDIA, type MediaSet } from "./media";
import type { SpooledCall } from "./spool";

export const DEFAULT_QUEUE_BYTES = 64 * 1024 * 1024;
export const BATCH_BYTES = 1_500_000;
export const BATCH_LINGER_MS = 1000;
/** Overflow warnings come at most this often, each with the count since the last. */
const DROP_WARNING_EVERY_MS = 10_000;
/** Once closing, a failed batch is tried again at least this often: the close has seconds, not the backoff's half minute. */
const CLOSING_RETRY_MS = 500;

export type ShipperOptions = {
  post: (batch: CallBatch) => Promise<CallBatchResponse>;
  putMedia: (sha256: string, data: string) => Promise<unknown>;
  clock: Clock;
  logger: Logger;
  backoff: BackoffOptions;
  maxQueueBytes?: number;
  batchBytes?: number;
  batchCalls?: number;
  lingerMs?: number;
};

/**
 * `bytes`: the record's and its media's, for the queue's bound; `recordBytes`: the record's alone,
 * for a batch's (its media go up apart, and the batch holds only references to them).
 */
type Queued = { record: CallRecord; bytes: number; recordBytes: number; at: number; media: MediaSet };

/** How long media go unsent after an exchange answered that it has no media route. */
export const NO_MEDIA_ROUTE_RETRY_MS = 10 * 60 * 1000;

/**
 * How many refusals of its parts a batch refused for what it holds may take while it is halved.
 * One bad call in 500 takes 10 (one a halving); when every call is refused (an exchange that
 * takes no record of this agent's), the halving stops here, not after about 1,000 requests.
 */
export const MAX_SPLIT_REFUSALS = 24;

/**
 * A 500 is the exchange failing on what it was sent (its own fault), not an outage (a 502-504,
 * or its 503 `ledger_unavailable`): a batch answered 500 this many times in a row is halved,
 * as a refused one is, so that a call the exchange keeps failing on holds back no others. Its
 * halves are halved at their first 500, and one call alone is dropped after this many.
 */
export const INTERNAL_ERRORS_TO_HALVE = 3;

/** Refusals that name something in the batch rather than the request (a revoked token, a deleted engine). */
const refusedForContent = (e: ExchangeError): boolean => e.status === 413 || e.status === 422;

/** Media remembered as uploaded: far more than the screenshots of the episodes live at once. */
const MAX_UPLOADED_MEDIA = 10_000;

const utcDay = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

/** A batch and the media its records refer to; `bytes` and `at` (its oldest call's) as they were queued; `items`, its calls as queued. */
type Outgoing = { batch: CallBatch; media: Map<string, string>; bytes: number; at: number; items: Queued[]; suspect: boolean };

/** `items` as a batch of their own, with a new id and the media their records name; `suspect`: a half of one the exchange kept failing on. */
function outgoing(items: Queued[], suspect = false): Outgoing {
  const media = new Map<string, string>();
  let bytes = 0;
  let at = Infinity;
  for (const q of items) {
    bytes += q.bytes;
    at = Math.min(at, q.at);
    for (const [d, data] of q.media) media.set(d, data);
  }
  return { batch: { batch_id: randomUUID().replaceAll("-", ""), calls: items.map((q) => q.record) }, media, bytes, at, items, suspect };
}

/** `out` as two batches of half its calls each, under ids of their own (nothing of `out` is kept by the exchange). */
const halves = (out: Outgoing, suspect: boolean): Outgoing[] => {
  const half = Math.ceil(out.items.length / 2);
  return [outgoing(out.items.slice(0, half), suspect), outgoing(out.items.slice(half), suspect)];
};

export class CallShipper {
  private readonly queue: Queued[] = [];
  private queuedBytes = 0;
  /** The queued records' bytes without their media: what the next batches will weigh. */
  private queuedRecordBytes = 0;
  private readonly stats = { sent: 0, duplicates: 0, dropped: 0, refused: 0 };
  private droppedSinceWarning = 0;
  private lastDropWarning = -Infinity;
  private running: Promise<void> | null = null;
  /** Wakes the loop from its linger (a full batch, a flush). */
  private wake = new AbortController();
  private flushing = false;
  /** Aborted by close(): cuts a retry's backoff short, to try once more while the close lasts. */
  private readonly closing = new AbortController();
  /** Aborts waits when a shutdown's deadline passes. */
  private readonly stopper = new AbortController();
  private readonly backoff: Backoff;
  /** The batch taken from the queue, as the parts of it not yet stored or refused (halves of a refused batch), in order. */
  private inFlight: Outgoing[] = [];
  /** Media uploaded, each with the UTC day it was: uploaded again on another day. Oldest first out. */
  private readonly uploaded = new Map<string, string>();
  /** Until when uploads are skipped: the exchange said it has no media route (an older Worker). */
  private noMediaRouteUntil = -Infinity;
  /** Media the exchange refused as too large (an older Worker's smaller limit), each until it is tried again. */
  private readonly tooLarge = new Map<string, number>();

  constructor(private readonly o: ShipperOptions) {
    this.backoff = new Backoff(o.backoff);
  }

  private get batchCalls(): number {
    return this.o.batchCalls ?? MAX_CALLS_PER_BATCH;
  }
  private get batchBytes(): number {
    return this.o.batchBytes ?? BATCH_BYTES;
  }

  /** `bytes` is the record's; its media's are counted in the queue's bound too. */
  enqueue(record: CallRecord, bytes: number, media: MediaSet = NO_MEDIA): void {
    if (this.stopper.signal.aborted) return;
    const recordBytes = bytes;
    for (const data of media.values()) bytes += data.length;
    const max = this.o.maxQueueBytes ?? DEFAULT_QUEUE_BYTES;
    if (bytes > max) {
      // More than the whole queue holds: it alone goes, not every call queued before it.
      this.stats.dropped++;
      this.droppedSinceWarning++;
    } else {
      this.queue.push({ record, bytes, recordBytes, at: this.o.clock.now(), media });
      this.queuedBytes += bytes;
      this.queuedRecordBytes += recordBytes;
    }
    while (this.queuedBytes > max && this.queue.length > 0) {
      const old = this.queue.shift() as Queued;
      this.queuedBytes -= old.bytes;
      this.queuedRecordBytes -= old.recordBytes;
      this.stats.dropped++;
      this.droppedSinceWarning++;
    }
    if (this.droppedSinceWarning > 0 && this.o.clock.now() - this.lastDropWarning >= DROP_WARNING_EVERY_MS) {
      this.o.logger.warn(`ledger: the queue of recorded calls is over its ${max} bytes (the exchange is not taking them fast enough): dropped ${this.droppedSinceWarning}, the oldest or one larger than the whole queue (${this.stats.dropped} in all)`);
      this.droppedSinceWarning = 0;
      this.lastDropWarning = this.o.clock.now();
    }
    if (this.queue.length >= this.batchCalls || this.queuedRecordBytes >= this.batchBytes) this.wake.abort();
    this.running ??= this.loop().finally(() => (this.running = null));
  }

  /** What the heartbeat says of the shipper (AgentLedgerReport): the batch being sent counts as queued until it is stored. */
  report(): Omit<AgentLedgerReport, "unrecorded_calls"> {
    const sending = this.inFlight;
    const oldest = sending.length > 0 ? Math.min(...sending.map((p) => p.at)) : this.queue[0]?.at;
    return {
      queued_calls: this.queue.length + sending.reduce((n, p) => n + p.items.length, 0),
      queued_bytes: this.queuedBytes + sending.reduce((n, p) => n + p.bytes, 0),
      oldest_queued_ms: oldest === undefined ? null : Math.max(0, this.o.clock.now() - oldest),
      sent_calls: this.stats.sent,
      duplicate_calls: this.stats.duplicates,
      dropped_calls: this.stats.dropped,
      refused_calls: this.stats.refused,
    };
  }

  /**
   * Sends what is queued without waiting for batches to fill, within `deadlineMs`; what is left
   * after it goes to `keep` (the spool, for the next start) or, when it cannot, is counted lost.
   * Calls recorded after this are dropped.
   */
  async close(deadlineMs: number, keep?: (calls: SpooledCall[]) => boolean): Promise<void> {
    this.flushing = true;
    this.wake.abort();
    this.closing.abort();
    const running = this.running;
    if (running !== null && deadlineMs > 0) {
      const timeUp = new AbortController();
      await Promise.race([running, this.o.clock.sleep(deadlineMs, timeUp.signal)]);
      timeUp.abort();
    }
    this.stopper.abort();
    // The batch in flight first: its calls are the oldest, and may be stored already (sent again, they count as duplicates).
    const left = [...this.inFlight.flatMap((p) => p.items), ...this.queue];
    if (left.length > 0 && keep?.(left.map((q) => ({ record: q.record, bytes: q.recordBytes, media: q.media }))) === true) {
      this.o.logger.warn(`ledger: stopped with ${left.length} recorded call${left.length === 1 ? "" : "s"} not sent: kept for the next start to send`);
    } else if (left.length > 0) {
      this.o.logger.warn(`ledger: stopped with ${left.length} recorded call${left.length === 1 ? "" : "s"} not sent`);
    }
    this.queue.length = 0;
    this.queuedBytes = 0;
    this.queuedRecordBytes = 0;
  }

  private async loop(): Promise<void> {
    while (this.queue.length > 0 && !this.stopper.signal.aborted) {
      const first = this.queue[0] as Queued;
      const full = this.queue.length >= this.batchCalls || this.queuedRecordBytes >= this.batchBytes;
      const wait = first.at + (this.o.lingerMs ?? BATCH_LINGER_MS) - this.o.clock.now();
      if (!full && !this.flushing && wait > 0) {
        if (this.wake.signal.aborted) this.wake = new AbortController();
        await this.o.clock.sleep(wait, AbortSignal.any([this.wake.signal, this.stopper.signal]));
        continue;
      }
      this.inFlight = [this.takeBatch()];
      const split = { refusals: MAX_SPLIT_REFUSALS };
      while (this.inFlight.length > 0 && !this.stopper.signal.aborted) {
        const halves = await this.send(this.inFlight[0] as Outgoing, split);
        // Stopped: the part stays, for close() to keep.
        if (halves !== null) this.inFlight.splice(0, 1, ...halves);
      }
    }
  }

  private takeBatch(): Outgoing {
    const items: Queued[] = [];
    let recordBytes = 0;
    while (this.queue.length > 0 && items.length < this.batchCalls) {
      const next = this.queue[0] as Queued;
      if (items.length > 0 && recordBytes + next.recordBytes > this.batchBytes) break;
      this.queue.shift();
      this.queuedBytes -= next.bytes;
      this.queuedRecordBytes -= next.recordBytes;
      recordBytes += next.recordBytes;
      items.push(next);
    }
    return outgoing(items);
  }

  /** Uploads the media not uploaded today. */
  private async upload(media: ReadonlyMap<string, string>): Promise<void> {
    for (const [d, data] of media) {
      if (this.o.clock.now() < this.noMediaRouteUntil) return;
      const today = utcDay(this.o.clock.now());
      if (this.uploaded.get(d) === today) continue;
      if ((this.tooLarge.get(d) ?? -Infinity) > this.o.clock.now()) continue;
      try {
        await this.o.putMedia(d, data);
      } catch (e) {
        // A 2xx in a shape a newer exchange answers: the medium is stored. Thrown on, it was
        // taken for the batch's own answer, and the batch was never sent.
        if (e instanceof ExchangeError && e.code === UNREADABLE_ANSWER) {
          this.o.logger.warn(`ledger: the exchange took medium ${d} but its answer could not be read: ${e.message}`);
        } else if (e instanceof ExchangeError && e.status === 413) {
          // An exchange older than this agent, whose media are smaller: its records are sent with a marker in its place (below).
          if (this.tooLarge.size >= MAX_UPLOADED_MEDIA) this.tooLarge.delete(this.tooLarge.keys().next().value as string);
          this.tooLarge.set(d, this.o.clock.now() + NO_MEDIA_ROUTE_RETRY_MS);
          this.o.logger.warn(`ledger: the exchange refused a medium of ${data.length} bytes as too large (${e.code}: it is older than this agent); the calls naming it are recorded with a marker in its place (rx-media-missing:sha256:${d})`);
          continue;
        } else {
          if (!(e instanceof ExchangeError && e.status === 404 && e.code === "not_found")) throw e;
          // An older exchange, which would store the batch without looking for its media.
          this.noMediaRouteUntil = this.o.clock.now() + NO_MEDIA_ROUTE_RETRY_MS;
          this.o.logger.warn(`ledger: the exchange has no media route (it is older than this agent; docs/operations.md gives the upgrade order): recorded calls are sent with references to media it does not hold, for the next ${NO_MEDIA_ROUTE_RETRY_MS / 60_000} minutes`);
          return;
        }
      }
      this.uploaded.delete(d);
      this.uploaded.set(d, today);
      if (this.uploaded.size > MAX_UPLOADED_MEDIA) this.uploaded.delete(this.uploaded.keys().next().value as string);
    }
  }

  /**
   * `batch` with each reference to a medium the exchange refused as too large replaced by a
   * marker that names no medium (missingMediaRef), rather than refused whole for a medium it
   * does not hold. The records keep their messages, tokens and prefix: a claim's later calls,
   * stored as deltas of one of them, rebuild whole, short of that medium only.
   */
  private withRefusedMarked(batch: CallBatch, media: ReadonlyMap<string, string>): CallBatch {
    const refused = [...media.keys()].filter((d) => (this.tooLarge.get(d) ?? -Infinity) > this.o.clock.now());
    if (refused.length === 0) return batch;
    const calls = batch.calls.map((r): CallRecord => {
      const before = JSON.stringify(r.body);
      // A reference is ASCII, written in JSON as it is: a plain replace finds every one.
      let text = before;
      for (const d of refused) text = text.replaceAll(mediaRef(d), missingMediaRef(d));
      return text === before ? r : { ...r, body: JSON.parse(text) as CallRecord["body"] };
    });
    return { ...batch, calls };
  }

  /**
   * Sends `out` until stored or refused ([]), or halved ([first, second]: each to be sent in its
   * place); null when stopped first. `split` counts the refusals the halving may still take.
   */
  private async send(out: Outgoing, split: { refusals: number }): Promise<Outgoing[] | null> {
    let batch = out.batch;
    let internalErrors = 0;
    for (;;) {
      if (this.stopper.signal.aborted) return null;
      try {
        await this.upload(out.media);
        batch = this.withRefusedMarked(batch, out.media);
        const r = await this.o.post(batch);
        this.stats.sent += r.recorded;
        this.stats.duplicates += r.duplicates;
        this.backoff.reset();
        return [];
      } catch (e) {
        if (e instanceof ExchangeError && e.code === UNREADABLE_ANSWER) {
          // A 2xx: the batch is stored, and sent again it would be answered the same (a newer exchange's counts).
          this.o.logger.warn(`ledger: the exchange took batch ${batch.batch_id} but its answer could not be read: ${e.message}`);
          this.backoff.reset();
          return [];
        }
        if (e instanceof ExchangeError && e.status === 409 && e.code === "media_missing") {
          // The exchange's day is not the one they were uploaded on: upload them again, then the batch.
          for (const d of out.media.keys()) this.uploaded.delete(d);
          // Only an exchange with the media route checks a batch's media: a 404 seen before came
          // from elsewhere (a request of a gradual deployment served by the previous version).
          this.noMediaRouteUntil = -Infinity;
        } else if (e instanceof ExchangeError && e.status >= 400 && e.status < 500 && e.status !== 408 && e.status !== 429) {
          // The exchange answered: the next failure is a new outage, logged, with its backoff from the start.
          this.backoff.reset();
          if (refusedForContent(e) && out.items.length > 1 && split.refusals > 0) {
            split.refusals--;
            // Each half with its own calls' media.
            return halves(out, false);
          }
          this.stats.refused += batch.calls.length;
          this.o.logger.warn(`ledger: the exchange refused a batch of ${batch.calls.length} recorded call${batch.calls.length === 1 ? "" : "s"} (${batch.batch_id}), dropped: ${e.message}`);
          return [];
        }
        if (e instanceof ExchangeError && e.status === 500 && ++internalErrors >= (out.suspect ? 1 : INTERNAL_ERRORS_TO_HALVE)) {
          if (out.items.length > 1 && split.refusals > 0) {
            split.refusals--;
            this.o.logger.warn(`ledger: the exchange failed ${internalErrors} time${internalErrors === 1 ? "" : "s"} on a batch of ${out.items.length} recorded calls (${describeError(e)}); sending it in halves`);
            return halves(out, true);
          }
          if (out.items.length === 1 && internalErrors >= INTERNAL_ERRORS_TO_HALVE) {
            this.stats.refused += 1;
            this.o.logger.warn(`ledger: the exchange failed ${internalErrors} times on recorded call ${batch.calls[0]?.call_id ?? "?"}, dropped: ${describeError(e)}`);
            this.backoff.reset();
            return [];
          }
        }
        const backoff = this.backoff.next();
        // Retry-After is the least wait, never less than the backoff: a 0, or a date already
        // past (a skewed clock), resent at once, again and again, to an exchange that said it was overloaded.
        const wait = e instanceof ExchangeError && e.retryAfterSeconds !== null ? Math.max(e.retryAfterSeconds * 1000, backoff) : backoff;
        if (this.backoff.consecutiveFailures <= 1) this.o.logger.warn(`ledger: sending ${batch.calls.length} recorded calls failed (${describeError(e)}); retrying`);
        if (this.flushing) await this.o.clock.sleep(Math.min(wait, CLOSING_RETRY_MS), this.stopper.signal);
        else await this.o.clock.sleep(wait, AbortSignal.any([this.stopper.signal, this.closing.signal]));
      }
    }
  }
}
