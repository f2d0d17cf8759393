/**
 * A ClaimGate on a real engine whose clock is the engine's, moved by the test, for
 * test/relay-gate.test.ts and test/relay-gate-faults.test.ts. It counts the requests the gate
 * makes, and can make the engine RPC fail or lag as a network would (the engine itself is real).
 */
import { expect } from "vitest";
import type { ClaimKeyFields } from "../../src/auth/claim-key";
import { ClaimGate, type GateClock } from "../../src/relay/claim-gate";
import type { RelaySyncItem } from "../../src/engine/relay-admission";
import { advance, claimKeyFields, createEngine, rollingWith, withGateway, type TestEngine } from "./harness";

/** What happens to the next engine request. */
export type Fault =
  /** The RPC fails before it reaches the engine (nothing applied): the engine unreachable. */
  | "throw-before"
  /** The engine applies the batch, then the connection is lost (the Worker sees an exception). */
  | "throw-after"
  /** The engine applies the batch at once; its answer reaches the Worker only when released. */
  | "late-answer"
  /** The request reaches the engine only when released (a slow route lookup, a slow link). */
  | "late-send"
  /** The request is cut off: it never reaches the engine, and no answer ever comes. */
  | "cut-off";

export function gateOn(e: TestEngine, o: { maxClaims?: number } = {}) {
  const waits: { at: number; resolve: () => void }[] = [];
  const clock: GateClock = { now: () => e.clock.t, wait: (ms) => new Promise((resolve) => waits.push({ at: e.clock.t + ms, resolve })) };
  const background: { work: Promise<unknown>; done: boolean }[] = [];
  /** The gate's background work, noted as done when it is. */
  const track = (work: Promise<unknown>): void => {
    const b = { work, done: false };
    background.push(b);
    void work.finally(() => (b.done = true));
  };
  const sent: RelaySyncItem[][] = [];
  /** Batches the engine has processed. */
  let processed = 0;
  const faults: Fault[] = [];
  /** The requests and answers held by a late fault, oldest first. */
  const releases: (() => void)[] = [];
  /** While set, every answer of the engine waits for it: a slow engine, as under load. */
  let hold: Promise<void> | null = null;
  const gate = new ClaimGate(async (items) => {
    sent.push(items);
    const fault = faults.shift();
    if (fault === "throw-before") throw new Error("Network connection lost.");
    if (fault === "cut-off") return new Promise<never>(() => {});
    if (fault === "late-send") await new Promise<void>((r) => releases.push(r));
    const reply = await e.stub.relaySync(items);
    processed++;
    if (fault === "throw-after") throw new Error("Network connection lost.");
    if (fault === "late-answer") await new Promise<void>((r) => releases.push(r));
    if (hold !== null) await hold;
    return reply;
  }, clock, o.maxClaims);
  /** Until every background batch is done but those waiting on a time still ahead (a flush waits once). */
  async function settle(): Promise<void> {
    for (let turns = 0; turns < 100; turns++) {
      const undone = background.filter((b) => !b.done);
      if (undone.length <= waits.length) return;
      await Promise.race([Promise.all(undone.map((b) => b.work)), new Promise((r) => setTimeout(r, 5))]);
    }
    throw new Error("the gate's background work did not settle");
  }
  return {
    gate,
    sent,
    get processed() {
      return processed;
    },
    /** The next engine requests meet these faults, in order. */
    fault(...f: Fault[]): void {
      faults.push(...f);
    },
    /** Releases the oldest request or answer held by a late fault (it must have got there). */
    release(): void {
      releases.shift()?.();
    },
    /** Requests and answers held by a late fault now. */
    get held() {
      return releases.length;
    },
    /**
     * Holds the engine's answers until the returned function is called. Unlike a "late-answer"
     * fault it holds however many requests go meanwhile, and its release needs none of them to
     * have got there yet.
     */
    holdAnswers(): () => void {
      let release = (): void => {};
      hold = new Promise<void>((r) => (release = r));
      return () => {
        hold = null;
        release();
      };
    },
    /** admitCached, as the relay asks first: the answer from the cache, or null when admitting means waiting. */
    cached: (key: ClaimKeyFields) => gate.admitCached(key, track),
    /** Admits without waiting for the gate's background work (for calls that overlap, or whose answer is held). */
    admitNow: (key: ClaimKeyFields) => gate.admit(key, track),
    async admit(key: ClaimKeyFields) {
      const r = await gate.admit(key, track);
      await settle();
      return r;
    },
    /** Moves the clock (and the engine's alarm), then lets the gate's due timers and background batches run. */
    async tick(ms: number, o: { settle: boolean } = { settle: true }) {
      await advance(e, ms);
      for (const w of waits.splice(0)) {
        if (w.at <= e.clock.t) w.resolve();
        else waits.push(w);
      }
      if (o.settle) await settle();
    },
    settle,
    /** Stops waiting for the background work not done now: a request cut off is never waited on again. */
    abandon(): void {
      for (const b of background) b.done = true;
    },
  };
}

/** Until `done` holds, giving the gate's background work turns to run (at most a second). */
export async function until(done: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !done(); i++) await new Promise((r) => setTimeout(r, 5));
  expect(done()).toBe(true);
}

export async function claim(e: TestEngine, client: string, timeoutSeconds = 60): Promise<ClaimKeyFields> {
  const c = await e.as("client").claimEpisode({ client_uuid: client, discard_episode_timeout: timeoutSeconds });
  expect(c.success).toBe(true);
  return claimKeyFields(c.openai_api_key);
}

export async function rollingEngine(n = 1): Promise<TestEngine> {
  const e = await createEngine();
  await rollingWith(e, n);
  await withGateway(e);
  return e;
}

export const running = async (e: TestEngine) => (await e.as("viewer").runningEpisodes()).episodes;
