/**
 * The relay's deadline watch (src/relay/deadline-watch.ts): one timer per isolate for the
 * deadlines of every waiting call, passed from request to request. The clock is the test's and
 * each call's request is modelled by its background (`ctx.waitUntil`): a request that is gone
 * throws there, and its timers are dropped. The hand-over across real requests in workerd is
 * checked end to end in test-e2e/relay.test.ts.
 */
import { describe, expect, it } from "vitest";
import { CONFIRM_MS, DeadlineWatch, TICK_MS, TURN_MS, type WatchClock } from "../src/relay/deadline-watch";

const settle = async (): Promise<void> => {
  for (let i = 0; i < 20; i++) await Promise.resolve();
};

function fakeTime() {
  let t = 0;
  type Timer = { at: number; fn: () => void; live: boolean };
  const timers: Timer[] = [];
  const clock: WatchClock = {
    now: () => t,
    set: (fn, ms) => {
      const timer = { at: t + ms, fn, live: true };
      timers.push(timer);
      return () => (timer.live = false);
    },
  };
  return {
    clock,
    now: () => t,
    /** Timers set so far. */
    get armed() {
      return timers.length;
    },
    get live() {
      return timers.filter((x) => x.live).length;
    },
    /** Every timer set so far is dropped, as when the requests that set them are cut off. */
    dropAll: () => timers.forEach((x) => (x.live = false)),
    /** Moves the clock and runs the timers due, without letting any promise continuation run first. */
    runTimersNow(ms: number): void {
      t += ms;
      for (const x of timers.filter((y) => y.live && y.at <= t).sort((a, b) => a.at - b.at)) {
        x.live = false;
        x.fn();
      }
    },
    async advance(ms: number): Promise<void> {
      const end = t + ms;
      for (;;) {
        await settle();
        const next = timers.filter((x) => x.live && x.at <= end).sort((a, b) => a.at - b.at)[0];
        if (next === undefined) break;
        t = next.at;
        next.live = false;
        next.fn();
      }
      t = end;
      await settle();
    },
  };
}

/** A call's request: what it keeps in the background, and whether it is gone. */
function request(gone = false) {
  const kept: { done: boolean }[] = [];
  return {
    kept,
    /** The request is cut off from now on. */
    cut: () => (gone = true),
    background: (work: Promise<unknown>): void => {
      if (gone) throw new Error("the request is gone");
      const k = { done: false };
      kept.push(k);
      void work.finally(() => (k.done = true));
    },
    /** Whether the request still keeps work of the watch. */
    get holding() {
      return kept.some((k) => !k.done);
    },
  };
}

/** A call under the watch whose answer the test gives (or never gives); `settled` says how it ended. */
function call(watch: DeadlineWatch, ms: number, req = request()) {
  let answer = (_: string): void => undefined;
  const work = new Promise<string>((r) => (answer = r));
  const out: { settled: null | { value: string } | { error: Error }; at: number } = { settled: null, at: -1 };
  return { req, answer, out, promise: watch.race(work, ms, req.background).then((value) => (out.settled = { value }), (error: Error) => (out.settled = { error })) };
}

const timedOut = (c: ReturnType<typeof call>): boolean => c.out.settled !== null && "error" in c.out.settled && c.out.settled.error.name === "TimeoutError";

/** `c` still waits `ms` - 1 from now, and has failed with a TimeoutError at `ms`. */
async function expectTimeoutIn(time: ReturnType<typeof fakeTime>, c: ReturnType<typeof call>, ms: number): Promise<void> {
  await time.advance(ms - 1);
  expect(c.out.settled).toBeNull();
  await time.advance(1);
  expect(timedOut(c)).toBe(true);
}

describe("deadline watch", () => {
  it("fails a call that gets no answer at its deadline to the millisecond, and answers the others as they come", async () => {
    const time = fakeTime();
    const watch = new DeadlineWatch(time.clock);
    const hung = call(watch, 1_000);
    const quick = call(watch, 1_000);
    await time.advance(300);
    quick.answer("hello");
    await settle();
    expect(quick.out.settled).toEqual({ value: "hello" });
    await expectTimeoutIn(time, hung, 700);
    expect(watch.size).toBe(0);
    expect(time.live).toBe(0);
    expect(hung.req.holding || quick.req.holding).toBe(false);
  });

  it("passes an upstream's error through as it is", async () => {
    const time = fakeTime();
    const watch = new DeadlineWatch(time.clock);
    const req = request();
    const failing = watch.race(Promise.reject(new TypeError("connection refused")), 1_000, req.background);
    await expect(failing).rejects.toThrow("connection refused");
    expect(watch.size).toBe(0);
    expect(req.holding).toBe(false);
  });

  it("arms about one timer per calls in flight, not one per call, and lets every request go once all are answered", async () => {
    const time = fakeTime();
    const watch = new DeadlineWatch(time.clock);
    const inFlight: ReturnType<typeof call>[] = [];
    const all: ReturnType<typeof call>[] = [];
    // 64 calls in flight; each ms 8 more come and the 8 oldest are answered.
    for (let ms = 0; ms < 250; ms++) {
      for (let k = 0; k < 8; k++) {
        const c = call(watch, 600_000);
        inFlight.push(c);
        all.push(c);
      }
      if (inFlight.length > 64) for (const c of inFlight.splice(0, 8)) c.answer("ok");
      await time.advance(1);
    }
    for (const c of inFlight.splice(0)) c.answer("ok");
    await time.advance(CONFIRM_MS);
    expect(all.length).toBe(2_000);
    expect(all.every((c) => c.out.settled !== null && "value" in c.out.settled)).toBe(true);
    // A timer per call would be 2,000; a hand-over to the newest call comes once per 64 answered.
    expect(time.armed).toBeLessThanOrEqual(2_000 / 16);
    expect(time.live).toBe(0);
    expect(all.some((c) => c.req.holding)).toBe(false);
  });

  it("hands the watch on from an answered holder: the waiting calls still fail at their deadlines", async () => {
    const time = fakeTime();
    const watch = new DeadlineWatch(time.clock);
    const holder = call(watch, 2_000);
    await time.advance(10);
    const a = call(watch, 2_000);
    await time.advance(10);
    const b = call(watch, 2_000);
    await time.advance(80);
    holder.answer("done");
    await settle();
    // The newest waiting call took the watch in its own request; the holder's is let go once it did.
    expect(b.req.holding).toBe(true);
    expect(holder.req.holding).toBe(false);
    await expectTimeoutIn(time, a, 2_010 - 100);
    await expectTimeoutIn(time, b, 10);
    expect(time.live).toBe(0);
  });

  it("gives a hand-over whose receiver's request is gone to another within CONFIRM_MS", async () => {
    const time = fakeTime();
    const watch = new DeadlineWatch(time.clock);
    const holder = call(watch, 2_000);
    const waiting = call(watch, 2_000);
    const gone = call(watch, 2_000, request(true));
    await time.advance(100);
    holder.answer("done");
    await settle();
    // The newest (gone) could not take it: the holder's request stays to check, then hands it on.
    expect(holder.req.holding).toBe(true);
    expect(waiting.req.holding).toBe(false);
    await time.advance(CONFIRM_MS);
    expect(waiting.req.holding).toBe(true);
    expect(holder.req.holding).toBe(false);
    await expectTimeoutIn(time, waiting, 2_000 - 100 - CONFIRM_MS);
    expect(timedOut(gone)).toBe(true);
    await time.advance(CONFIRM_MS);
    expect(time.live).toBe(0);
    expect(holder.req.holding || waiting.req.holding).toBe(false);
  });

  it("lets a hand-over that reaches its call only after the giver's check take the watch, which no one holds by then", async () => {
    const time = fakeTime();
    const watch = new DeadlineWatch(time.clock);
    const holder = call(watch, 2_000);
    const late = call(watch, 2_000);
    await time.advance(100);
    holder.answer("done");
    // The holder's answer runs (and hands the watch to \`late\`); \`late\`'s continuation has not.
    await Promise.resolve();
    time.runTimersNow(CONFIRM_MS);
    expect(late.req.holding).toBe(false);
    await settle();
    expect(late.req.holding).toBe(true);
    await expectTimeoutIn(time, late, 2_000 - 100 - CONFIRM_MS);
  });

  it("moves the watch on after TURN_MS even while its holder still waits, so no request keeps it past its background's 30 s", async () => {
    const time = fakeTime();
    const watch = new DeadlineWatch(time.clock);
    const first = call(watch, 60_000);
    await time.advance(1);
    const second = call(watch, 60_000);
    expect(first.req.holding).toBe(true);
    expect(second.req.holding).toBe(false);
    await time.advance(TURN_MS + TICK_MS);
    expect(first.req.holding).toBe(false);
    expect(second.req.holding).toBe(true);
    expect(TURN_MS + TICK_MS).toBeLessThan(30_000);
    await expectTimeoutIn(time, first, 60_000 - 1 - TURN_MS - TICK_MS);
    await time.advance(1);
    expect(timedOut(second)).toBe(true);
  });

  it("is taken by an arriving call when its holder went silent (its request cut off), and the calls it watched still fail", async () => {
    const time = fakeTime();
    const watch = new DeadlineWatch(time.clock);
    const orphan = call(watch, 30_000);
    await time.advance(1_000);
    orphan.req.cut();
    time.dropAll();
    await time.advance(TICK_MS + CONFIRM_MS);
    const newcomer = call(watch, 30_000);
    expect(newcomer.req.holding).toBe(true);
    await expectTimeoutIn(time, orphan, 30_000 - 1_000 - TICK_MS - CONFIRM_MS);
    newcomer.answer("late but fine");
    await settle();
    expect(newcomer.out.settled).toEqual({ value: "late but fine" });
    await time.advance(CONFIRM_MS);
    expect(time.live).toBe(0);
    expect(newcomer.req.holding).toBe(false);
  });
});
