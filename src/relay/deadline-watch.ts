/**
 * Deadlines of relayed calls with one timer per isolate instead of one per call. Arming a timer
 * costs a request in workerd about 0.03 ms of CPU, a tenth of a relayed call's
 * (`bench:relay-profile`, BENCHMARKS.md "The relay at scale"), and nearly every call answers
 * long before its deadline: so one waiting call at a time, the holder, keeps a timer for all,
 * and when it fires it fails every call past its deadline.
 *
 * A timer belongs to the request that armed it, and a request's background work is cut off
 * 30 s after its answer (or its client's disconnect) on Cloudflare. So the watch moves:
 *   - a holder whose call is answered hands the watch to the newest waiting call (the likeliest
 *     to wait longest, so hand-overs come about once per calls in flight, not once per call);
 *   - a holder keeps it at most TURN_MS, then hands it on even while its call waits;
 *   - its timer is never further than TICK_MS away.
 * A hand-over settles a promise the receiving call made in its own request, so the receiver
 * arms the next timer in its request (workerd runs a promise's continuations in the request
 * that made it, whoever settles it). Should the receiver be gone (its client left, its request
 * cut off), the giver, which checks CONFIRM_MS later, hands the watch to another; and should a
 * holder's request be cut off without warning, a call that arrives once the watch has been
 * silent CONFIRM_MS past its time takes it. A deadline is met to the timer's precision, and up
 * to CONFIRM_MS (1 s) late when it falls while a hand-over is being lost.
 */
import type { Background } from "./claim-gate";

/** The longest one request holds the watch; with TICK_MS, well within the 30 s its background work may run. */
export const TURN_MS = 15_000;
/** The longest the watch's timer is set for: a holder that went away is noticed by then. */
export const TICK_MS = 5_000;
/** How long a hand-over may take to be taken before the giver (or an arriving call) gives it to another. */
export const CONFIRM_MS = 1_000;

/** Timers, injected in tests: `set` runs `fn` after `ms` in the calling request, and answers a cancel. */
export type WatchClock = { now(): number; set(fn: () => void, ms: number): () => void };

export const realWatchClock: WatchClock = {
  now: () => Date.now(),
  set: (fn, ms) => {
    const t = setTimeout(fn, ms);
    return () => clearTimeout(t);
  },
};

type Watched = {
  due: number;
  /** Fails the call (from any request). */
  expire: (e: Error) => void;
  /** Gives this call the watch (from any request): its continuation takes it in this call's request. */
  take: () => void;
  background: Background;
  /** Older and newer waiting calls. */
  prev: Watched | null;
  next: Watched | null;
  waiting: boolean;
  /** Handed the watch and not yet reached by it (or never to be: its request is gone). */
  handed: boolean;
  /** While this call's request keeps a timer: cancels it (in this request only). */
  cancel: (() => void) | null;
  /** Lets this call's request end (from any request). */
  release: (() => void) | null;
};

export class DeadlineWatch {
  /** Waiting calls, oldest first: deadlines are all the same length, so the oldest is due first. */
  private oldest: Watched | null = null;
  private newest: Watched | null = null;
  private holder: Watched | null = null;
  /** When the holder took the watch, whether it has (a hand-over may be on its way), and who gave it. */
  private heldSince = 0;
  private taken = true;
  private giver: Watched | null = null;
  /** By when the watch should have acted: an arriving call takes it when it is silent past this. */
  private actBy = 0;

  constructor(
    private readonly clock: WatchClock = realWatchClock,
    private readonly timeoutError: () => Error = () => new DOMException("the call's deadline passed", "TimeoutError"),
  ) {}

  /** Settles as `work` does, or rejects with a TimeoutError once `ms` have passed. */
  race<T>(work: Promise<T>, ms: number, background: Background): Promise<T> {
    const now = this.clock.now();
    return new Promise<T>((resolve, reject) => {
      const w: Watched = { due: now + ms, expire: reject, take: () => undefined, background, prev: this.newest, next: null, waiting: true, handed: false, cancel: null, release: null };
      this.expectHandOver(w);
      if (this.newest !== null) this.newest.next = w;
      else this.oldest = w;
      this.newest = w;
      if (this.holder === null || now > this.actBy + CONFIRM_MS) this.hold(w, true);
      work.then(
        (v) => {
          this.done(w);
          resolve(v);
        },
        (e: unknown) => {
          this.done(w);
          reject(e);
        },
      );
    });
  }

  /** Calls waiting, for tests and diagnostics. */
  get size(): number {
    let n = 0;
    for (let w = this.oldest; w !== null; w = w.next) n++;
    return n;
  }

  /** Makes `w.take`, for a hand-over to reach `w` in its own request (a promise is settled once: one per hand-over). */
  private expectHandOver(w: Watched): void {
    void new Promise<void>((r) => (w.take = r)).then(() => this.reached(w));
  }

  /**
   * A hand-over reached `w`, in its request: it takes the watch if it is still its to take, or
   * if no one holds it (a hand-over that came too late to count, after the giver's check). One
   * whose request can keep no more work (gone) stays `handed`, never chosen again, and the
   * giver's check hands the watch on.
   */
  private reached(w: Watched): void {
    try {
      this.hold(w, this.holder === null);
    } catch {
      return;
    }
    w.handed = false;
    this.expectHandOver(w);
  }

  /** `w` takes the watch in its own request: at once (`now`), or on a hand-over reaching it. */
  private hold(w: Watched, now: boolean): void {
    if (!now && (this.holder !== w || this.taken)) return;
    if (!w.waiting) return;
    this.keep(w);
    const previous = this.holder;
    this.holder = w;
    this.taken = true;
    this.heldSince = this.clock.now();
    this.giver?.release?.();
    this.giver = null;
    if (previous !== null && previous !== w) previous.release?.();
    this.arm(w);
  }

  /** Keeps `w`'s request alive while it holds or gives the watch; throws, changing nothing, if that request is gone. */
  private keep(w: Watched): void {
    if (w.release !== null) return;
    let done = (): void => undefined;
    w.background(new Promise<void>((r) => (done = r)));
    w.release = () => {
      w.release = null;
      done();
    };
  }

  /** Sets `w`'s timer (in `w`'s request) for the oldest call's deadline, or TICK_MS, whichever is sooner. */
  private arm(w: Watched, ms = Math.min(TICK_MS, (this.oldest?.due ?? Number.POSITIVE_INFINITY) - this.clock.now())): void {
    w.cancel?.();
    this.keep(w);
    w.cancel = this.clock.set(() => this.fire(w), Math.max(0, ms));
    this.actBy = this.clock.now() + Math.max(0, ms);
  }

  private stop(w: Watched): void {
    w.cancel?.();
    w.cancel = null;
    w.release?.();
  }

  /** `w`'s timer: as holder, fails the calls past their deadline; as a giver, checks its hand-over was taken. */
  private fire(w: Watched): void {
    w.cancel = null;
    const stale = this.holder !== w && (this.taken || this.giver !== w);
    if (stale) return w.release?.();
    const now = this.clock.now();
    for (let x = this.oldest; x !== null && x.due <= now; x = this.oldest) {
      this.unlink(x);
      x.expire(this.timeoutError());
    }
    if (this.holder === w && w.waiting && now - this.heldSince < TURN_MS) return this.arm(w);
    this.pass(w);
  }

  /** A call answered: out of the waiting; a holder hands the watch on. */
  private done(w: Watched): void {
    if (w.waiting) this.unlink(w);
    if (this.holder === w) this.pass(w);
  }

  /**
   * The watch goes from `w` (answered, past its turn, or a giver whose hand-over was lost) to the
   * newest waiting call it can reach, or, with none, to `w` itself if it still waits, else to no one.
   */
  private pass(w: Watched): void {
    let to = this.newest;
    while (to !== null && (to === w || to.handed)) to = to.prev;
    if (to === null) {
      if (w.waiting && this.holder === w) return this.arm(w);
      if (w.waiting) return this.hold(w, true);
      this.holder = null;
      this.taken = true;
      this.giver = null;
      return this.stop(w);
    }
    this.holder = to;
    this.taken = false;
    this.giver = w;
    to.handed = true;
    to.take();
    this.arm(w, CONFIRM_MS);
  }

  private unlink(w: Watched): void {
    w.waiting = false;
    if (w.prev !== null) w.prev.next = w.next;
    else this.oldest = w.next;
    if (w.next !== null) w.next.prev = w.prev;
    else this.newest = w.prev;
    w.prev = w.next = null;
  }
}
