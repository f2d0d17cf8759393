/**
 * The shipper sending recorded calls through the real EngineClient to a local HTTP server that
 * stands in for the exchange's POST <engine>/agent/calls (the Worker's route is tested on the
 * Worker's side), with the manual clock: batch limits, retries that keep the batch id, refusals,
 * the queue's bound and the flush on close.
 */
import { createHash } from "node:crypto";
import { appendFileSync, existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { EngineClient, ExchangeError, UNREADABLE_ANSWER } from "../../../src/client";
import { CallBatch, MAX_CALLS_PER_BATCH, type CallBatchResponse, type CallRecord } from "../../../src/protocol/ledger";
import { LedgerSpool } from "../../src/ledger/spool";
import { CallShipper, MAX_SPLIT_REFUSALS, NO_MEDIA_ROUTE_RETRY_MS, type ShipperOptions } from "../../src/ledger/shipper";
import { ManualClock } from "../support/manual-clock";
import { MemoryLogger } from "../support/logger";
import { bodyText, serveHttp, type TestServer } from "../support/http-server";
import { waitUntil } from "../support/wait";
import { tempDir } from "../support/temp";
import { callRecord } from "./call-record";

type Received = { batch: CallBatch; authorization: string | undefined; path: string };
/** How the stand-in answers the next requests (then 200). */
type Answer = { status: number; headers?: Record<string, string>; body: unknown };

let server: TestServer;
let received: Received[];
/** Media uploaded (PUT agent/media/<sha256>), and every request's kind in order. */
let media: { sha256: string; data: string }[];
let order: string[];
let script: Answer[];
/** Refuses a batch by what it holds (after the script's answers), as the exchange's checks do. */
let refuse: (b: CallBatch) => Answer | null;
/** False: the stand-in is an exchange older than media, with no PUT agent/media route. */
let mediaRoute: boolean;
let clock: ManualClock;
let logger: MemoryLogger;
let shipper: CallShipper;

beforeEach(async () => {
  received = [];
  media = [];
  order = [];
  script = [];
  refuse = () => null;
  mediaRoute = true;
  const recorded = new Set<string>();
  server = await serveHttp(async (req, res) => {
    if (req.method === "PUT" && !mediaRoute) {
      order.push("media 404");
      res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ error: "not_found", detail: `No route PUT ${req.url}.` }));
      return;
    }
    if (req.method === "PUT") {
      const { data } = JSON.parse(await bodyText(req)) as { data: string };
      const sha256 = (req.url ?? "").split("/").at(-1) ?? "";
      // Kept in the order received with the batches, to tell which came first.
      order.push(`media ${sha256.slice(0, 8)}`);
      media.push({ sha256, data });
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ sha256, bytes: Buffer.byteLength(data) }));
      return;
    }
    const batch = CallBatch.parse(JSON.parse(await bodyText(req)));
    order.push(`batch ${batch.calls.length}`);
    received.push({ batch, authorization: req.headers.authorization, path: req.url ?? "" });
    const next = script.shift() ?? refuse(batch) ?? undefined;
    if (next !== undefined) {
      res.writeHead(next.status, { "content-type": "application/json", ...next.headers }).end(JSON.stringify(next.body));
      return;
    }
    let fresh = 0;
    for (const c of batch.calls) if (!recorded.has(c.call_id) && recorded.add(c.call_id)) fresh++;
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ recorded: fresh, duplicates: batch.calls.length - fresh }));
  });
  clock = new ManualClock();
  logger = new MemoryLogger();
});

afterEach(async () => {
  await shipper?.close(0);
  await server.close();
});

function start(over: Partial<ShipperOptions> = {}): void {
  const client = new EngineClient({ baseUrl: `${server.origin}/e/eng`, token: "trainer-token" });
  shipper = new CallShipper({ post: (b) => client.postCalls(b), putMedia: (d, data) => client.putMedia(d, data), clock, logger, backoff: { initialMs: 200, maxMs: 2000, random: () => 0 }, ...over });
}

const record = (content = "ok"): CallRecord => callRecord(content, clock.now());

const enqueue = (r: CallRecord): CallRecord => (shipper.enqueue(r, Buffer.byteLength(JSON.stringify(r))), r);
const settle = () => clock.advance(0);
const ids = (b: CallBatch) => b.calls.map((c) => c.call_id);

describe("ledger shipper", () => {
  it("sends what came within a second as one batch, with the trainer token, and full batches at once", async () => {
    start();
    const first = [enqueue(record()), enqueue(record()), enqueue(record())];
    await settle();
    await clock.advance(999);
    expect(received).toHaveLength(0);
    await clock.advance(1);
    await waitUntil(() => received.length === 1, "the first batch");
    expect(received[0]).toMatchObject({ authorization: "Bearer trainer-token", path: "/e/eng/agent/calls" });
    expect(ids(received[0]!.batch)).toEqual(first.map((r) => r.call_id));
    expect(received[0]!.batch.batch_id).toMatch(/^[A-Za-z0-9_-]{8,64}$/);

    // 1200 calls: two full batches go without waiting, the rest after the linger.
    const many = Array.from({ length: 1200 }, () => enqueue(record()));
    await waitUntil(() => received.length === 3, "two full batches");
    expect(received.slice(1).map((r) => r.batch.calls.length)).toEqual([MAX_CALLS_PER_BATCH, MAX_CALLS_PER_BATCH]);
    await clock.advance(1000);
    await waitUntil(() => received.length === 4, "the rest");
    expect(received.slice(1).flatMap((r) => ids(r.batch))).toEqual(many.map((r) => r.call_id));
    await waitUntil(() => shipper.report().sent_calls === 1203, "all recorded");
  });

  it("keeps a batch to about 1.5 MB of JSON", async () => {
    start();
    const big = "x".repeat(600_000);
    for (let i = 0; i < 5; i++) enqueue(record(big));
    await waitUntil(() => received.length === 2, "two full batches");
    expect(received.map((r) => r.batch.calls.length)).toEqual([2, 2]);
    await clock.advance(1000);
    await waitUntil(() => received.length === 3, "the last call");
    expect(received[2]!.batch.calls).toHaveLength(1);
  });

  it("retries network errors, 5xx, 408 and 429 with the same batch id, honouring Retry-After", async () => {
    start();
    script = [
      { status: 503, body: { error: "unavailable", detail: "down for a moment" } },
      { status: 408, body: { error: "timeout", detail: "slow" } },
      { status: 429, headers: { "retry-after": "7" }, body: { error: "rate_limited", detail: "slow down" } },
    ];
    enqueue(record());
    await clock.advance(1000);
    await waitUntil(() => received.length === 1, "the first try");
    // Backoff with no jitter: 100 ms, then 200 ms.
    await waitUntil(() => clock.pending.includes(100), "the backoff");
    await clock.advance(100);
    await waitUntil(() => received.length === 2, "the second try");
    await waitUntil(() => clock.pending.includes(200), "the backoff");
    await clock.advance(200);
    await waitUntil(() => received.length === 3, "the third try");
    await waitUntil(() => clock.pending.includes(7000), "the Retry-After wait");
    await clock.advance(6999);
    expect(received).toHaveLength(3);
    await clock.advance(1);
    await waitUntil(() => received.length === 4, "the fourth try");
    expect(new Set(received.map((r) => r.batch.batch_id)).size).toBe(1);
    await waitUntil(() => shipper.report().sent_calls === 1, "recorded");
    expect(shipper.report()).toMatchObject({ refused_calls: 0, dropped_calls: 0, queued_calls: 0 });
  });

  it("waits its backoff at least when a Retry-After says 0 or names a time already past (a skewed clock)", async () => {
    // The header took the backoff's place: each such answer was sent again at once, over and over,
    // to an exchange that had just said it was overloaded.
    start();
    script = [
      { status: 429, headers: { "retry-after": "0" }, body: { error: "rate_limited", detail: "slow down" } },
      { status: 503, headers: { "retry-after": new Date(Date.now() - 60_000).toUTCString() }, body: { error: "unavailable", detail: "busy" } },
    ];
    enqueue(record());
    await clock.advance(1000);
    await waitUntil(() => received.length === 1, "the first try");
    await waitUntil(() => clock.pending.includes(100), "the backoff, not Retry-After's 0");
    await settle();
    expect(received).toHaveLength(1);
    await clock.advance(100);
    await waitUntil(() => received.length === 2, "the second try");
    await waitUntil(() => clock.pending.includes(200), "the backoff, not a date already past");
    await clock.advance(200);
    await waitUntil(() => shipper.report().sent_calls === 1, "recorded");
  });

  it("after a refused batch, logs the next failure as a new outage, and starts its backoff over", async () => {
    // The backoff was reset only when a batch was stored: the failures before a refusal stayed
    // counted, so the next outage went unlogged and waited the grown backoff.
    start();
    const down = { status: 503, body: { error: "unavailable", detail: "down" } };
    script = [down, down, { status: 422, body: { error: "invalid_request", detail: "no" } }, down];
    enqueue(record());
    await clock.advance(1000);
    await waitUntil(() => clock.pending.includes(100), "the first backoff");
    await clock.advance(100);
    await waitUntil(() => clock.pending.includes(200), "the second backoff");
    await clock.advance(200);
    await waitUntil(() => shipper.report().refused_calls === 1, "the refusal");
    const logged = () => logger.lines.filter((l) => l.includes("recorded calls failed")).length;
    expect(logged()).toBe(1);
    enqueue(record());
    await clock.advance(1000);
    await waitUntil(() => received.length === 4, "the next batch's first try");
    await waitUntil(() => clock.pending.includes(100), "a backoff from its start");
    expect(logged()).toBe(2);
  });

  it("retries when the exchange cannot be reached at all", async () => {
    const port = new URL(server.origin).port;
    await server.close();
    const client = new EngineClient({ baseUrl: `http://127.0.0.1:${port}/e/eng`, token: "t" });
    let tries = 0;
    shipper = new CallShipper({ post: (b) => (tries++, client.postCalls(b)), putMedia: (d, data) => client.putMedia(d, data), clock, logger, backoff: { initialMs: 200, maxMs: 2000, random: () => 0 } });
    enqueue(record());
    await clock.advance(1000);
    await waitUntil(() => clock.pending.includes(100), "the backoff after a refused connection");
    expect(tries).toBe(1);
    expect(logger.lines.join("\n")).toContain("ledger: sending 1 recorded calls failed");
    server = await serveHttp(async (_req, res) => void res.end()); // for afterEach
  });

  it("takes a batch answered 2xx in a shape it cannot read (a newer exchange's) as stored, without sending it again", async () => {
    start();
    script = [{ status: 200, body: { recorded: "all of them", duplicates: 0 } }];
    enqueue(record());
    await clock.advance(1000);
    await waitUntil(() => logger.lines.some((l) => /ledger: the exchange took batch .* but its answer could not be read/.test(l)), "the warning");
    expect(received).toHaveLength(1);
    expect(clock.pending).toEqual([]);
    expect(shipper.report()).toMatchObject({ refused_calls: 0, dropped_calls: 0, queued_calls: 0 });
  });

  it("drops a batch the exchange refuses with another 4xx, saying why, and goes on", async () => {
    start();
    script = [{ status: 422, body: { error: "invalid_request", detail: "calls.0.fence: Expected number" } }];
    enqueue(record());
    await clock.advance(1000);
    await waitUntil(() => shipper.report().refused_calls === 1, "the refusal");
    expect(logger.lines.join("\n")).toMatch(/ledger: the exchange refused a batch of 1 recorded call .*dropped: 422 invalid_request: calls\.0\.fence: Expected number/);
    const next = enqueue(record());
    await clock.advance(1000);
    await waitUntil(() => received.length === 2, "the next batch");
    expect(ids(received[1]!.batch)).toEqual([next.call_id]);
    expect(clock.pending).toEqual([]);
  });

  describe("a batch refused for what it holds (413, 422)", () => {
    const tooLong: Answer = { status: 413, body: { error: "payload_too_large", detail: "calls.3.body: over its limit" } };
    const holdsBad = (b: CallBatch): Answer | null => (b.calls.some((c) => c.body.answer?.content === "bad") ? tooLong : null);
    const stored = () => received.filter((r) => !holdsBad(r.batch)).flatMap((r) => ids(r.batch));

    it("is sent again in halves: one call the exchange will not take costs that call alone", async () => {
      start();
      refuse = holdsBad;
      const calls = Array.from({ length: 64 }, (_, i) => enqueue(record(i === 37 ? "bad" : "ok")));
      await clock.advance(1000);
      await waitUntil(() => shipper.report().refused_calls === 1 && shipper.report().sent_calls === 63, "the halving");
      expect(stored().sort()).toEqual(calls.filter((_, i) => i !== 37).map((c) => c.call_id).sort());
      // One refusal a halving (64 -> 1 is six), each answered half stored at once.
      expect(received.length).toBe(1 + 2 * 6);
      expect(new Set(received.map((r) => r.batch.batch_id)).size).toBe(received.length);
      const refusals = logger.lines.filter((l) => l.includes("refused a batch"));
      expect(refusals).toHaveLength(1);
      expect(refusals[0]).toMatch(/ledger: the exchange refused a batch of 1 recorded call .*dropped: 413 payload_too_large/);
      expect(shipper.report().queued_calls).toBe(0);
    });

    it("stops halving after its bound when the exchange takes no call of it", async () => {
      start();
      refuse = () => ({ status: 422, body: { error: "invalid_request", detail: "calls.0.capture: Invalid option" } });
      for (let i = 0; i < 500; i++) enqueue(record());
      await settle();
      await waitUntil(() => shipper.report().refused_calls === 500, "every call refused");
      // The halving's requests: MAX_SPLIT_REFUSALS halvings, two halves each, and the first.
      expect(received.length).toBeLessThanOrEqual(1 + 2 * MAX_SPLIT_REFUSALS);
      expect(shipper.report().sent_calls).toBe(0);
    });

    // The exchange as a function here: the test holds a half's answer back, or refuses a medium.
    const refusedWhole = () => new ExchangeError(413, "payload_too_large", "calls.1.body: over its limit");
    const holds = (b: CallBatch, content: string) => b.calls.some((c) => c.body.answer?.content === content);
    const storedAll = (b: CallBatch): Promise<CallBatchResponse> => Promise.resolve({ recorded: b.calls.length, duplicates: 0 });
    const enqueueAll = (contents: string[]) => contents.map((c) => enqueue(record(c)));

    it("reports each call once while halving: the halves stored or refused are no longer queued", async () => {
      let release = (): void => {};
      const held = new Promise<void>((r) => (release = r));
      let reached = false;
      start({
        batchCalls: 4,
        post: async (b) => {
          if (holds(b, "bad")) throw refusedWhole();
          if (holds(b, "slow")) {
            reached = true;
            await held;
          }
          return storedAll(b);
        },
      });
      // [good, bad, slow, slow] refused; [good, bad] refused; [good] stored, [bad] refused; [slow, slow] held.
      enqueueAll(["good", "bad", "slow", "slow"]);
      await settle();
      await waitUntil(() => reached, "the last half in flight");
      expect(shipper.report()).toMatchObject({ sent_calls: 1, refused_calls: 1, queued_calls: 2 });
      release();
      await waitUntil(() => shipper.report().sent_calls === 3, "the last half stored");
      expect(shipper.report()).toMatchObject({ refused_calls: 1, queued_calls: 0, queued_bytes: 0 });
    });

    it("keeps for the next start only the halves not yet stored or refused when stopped during the halving", async () => {
      start({
        batchCalls: 4,
        post: async (b) => {
          if (holds(b, "bad")) throw refusedWhole();
          if (holds(b, "down")) throw new ExchangeError(503, "ledger_unavailable", "down");
          return storedAll(b);
        },
      });
      const calls = enqueueAll(["good", "bad", "down", "down"]);
      await settle();
      await waitUntil(() => shipper.report().refused_calls === 1 && shipper.report().sent_calls === 1 && clock.pending.length > 0, "the last half retried");
      let kept: string[] = [];
      const closing = shipper.close(1000, (c) => ((kept = c.map((k) => k.record.call_id)), true));
      await waitUntil(() => clock.pending.includes(1000), "the close's deadline");
      await clock.advance(1000);
      await closing;
      expect(kept).toEqual(calls.slice(2).map((c) => c.call_id));
    });

    it("uploads with each half only its own calls' media: a medium the exchange refuses costs the call naming it alone", async () => {
      const bad = "a".repeat(64);
      const posted: string[] = [];
      start({
        batchCalls: 4,
        post: (b) => (posted.push(...ids(b)), storedAll(b)),
        putMedia: async (sha) => {
          if (sha === bad) throw new ExchangeError(422, "media_hash_mismatch", "not that medium");
          return { sha256: sha, bytes: 1 };
        },
      });
      const naming = record(`rx-media:sha256:${bad}`);
      shipper.enqueue(naming, Buffer.byteLength(JSON.stringify(naming)), new Map([[bad, "data:image/png;base64,AAAA"]]));
      const plain = enqueueAll(["ok", "ok", "ok"]);
      await settle();
      await waitUntil(() => shipper.report().refused_calls + shipper.report().sent_calls === 4, "every call settled");
      expect(shipper.report()).toMatchObject({ refused_calls: 1, sent_calls: 3 });
      expect(posted.sort()).toEqual(plain.map((r) => r.call_id).sort());
    });

    it("halves a batch the exchange keeps failing on (500), so that the call it fails on holds back no others", async () => {
      const failedOn: number[] = [];
      start({
        batchCalls: 8,
        post: async (b) => {
          if (holds(b, "poison")) {
            failedOn.push(b.calls.length);
            throw new ExchangeError(500, "internal_error", "An internal error occurred (error id e1).");
          }
          return storedAll(b);
        },
      });
      const calls = enqueueAll(["ok", "ok", "ok", "ok", "ok", "poison", "ok", "ok"]);
      await settle();
      // Each failure waits the backoff (200 ms, then doubled; reset by the halves that are stored).
      for (let i = 0; i < 40 && shipper.report().refused_calls === 0; i++) await clock.advance(2000);
      expect(shipper.report()).toMatchObject({ sent_calls: 7, refused_calls: 1, queued_calls: 0 });
      // Three times whole, then each half holding it once, then the call alone three times.
      expect(failedOn).toEqual([8, 8, 8, 4, 2, 1, 1, 1]);
      expect(logger.lines.join("\n")).toContain(`ledger: the exchange failed 3 times on recorded call ${calls[5]!.call_id}, dropped: 500 internal_error`);
    });

    it("does not halve a batch for an outage (503): it waits for the exchange", async () => {
      let tries = 0;
      start({
        batchCalls: 8,
        post: async (b) => {
          if (++tries <= 6) throw new ExchangeError(503, "ledger_unavailable", "down");
          return storedAll(b);
        },
      });
      enqueueAll(["ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok"]);
      await settle();
      for (let i = 0; i < 20 && shipper.report().sent_calls === 0; i++) await clock.advance(2000);
      expect(shipper.report()).toMatchObject({ sent_calls: 8, refused_calls: 0 });
      expect(tries).toBe(7);
    });

    it("is not halved when the refusal is about the request, not its calls (a revoked token)", async () => {
      start();
      refuse = () => ({ status: 401, body: { error: "invalid_token", detail: "revoked" } });
      for (let i = 0; i < 8; i++) enqueue(record());
      await clock.advance(1000);
      await waitUntil(() => shipper.report().refused_calls === 8, "the refusal");
      expect(received.length).toBe(1);
    });
  });

  it("drops the oldest calls when the queue is over its bound, with a counted warning", async () => {
    const one = Buffer.byteLength(JSON.stringify(record()));
    start({ maxQueueBytes: one * 10 });
    const all = Array.from({ length: 25 }, () => enqueue(record()));
    expect(shipper.report()).toMatchObject({ queued_calls: 10, dropped_calls: 15 });
    expect(logger.lines.filter((l) => l.includes("dropped 1, the oldest"))).toHaveLength(1);
    expect(logger.lines.join("\n")).toContain("dropped 1, the oldest or one larger than the whole queue (1 in all)");
    await clock.advance(1000);
    await waitUntil(() => received.length === 1, "the batch");
    expect(ids(received[0]!.batch)).toEqual(all.slice(15).map((r) => r.call_id));
  });

  it("drops only a call larger than the whole queue, not every call queued before it", async () => {
    const one = Buffer.byteLength(JSON.stringify(record()));
    start({ maxQueueBytes: one * 10 });
    const kept = Array.from({ length: 5 }, () => enqueue(record()));
    shipper.enqueue(record("a call with screenshots past the queue's bound"), one * 11);
    expect(shipper.report()).toMatchObject({ queued_calls: 5, dropped_calls: 1 });
    await clock.advance(1000);
    await waitUntil(() => received.length === 1, "the batch");
    expect(ids(received[0]!.batch)).toEqual(kept.map((r) => r.call_id));
  });

  it("reports to the heartbeat what waits (a batch being retried included, with its oldest call's wait) and what was stored or lost", async () => {
    const one = Buffer.byteLength(JSON.stringify(record()));
    start({ maxQueueBytes: one * 3 });
    expect(shipper.report()).toEqual({ queued_calls: 0, queued_bytes: 0, oldest_queued_ms: null, sent_calls: 0, duplicate_calls: 0, dropped_calls: 0, refused_calls: 0 });
    script = [{ status: 503, body: { error: "unavailable", detail: "down for a moment" } }];
    enqueue(record());
    await clock.advance(400);
    enqueue(record());
    await clock.advance(600);
    await waitUntil(() => clock.pending.includes(100), "the backoff after the 503");
    // Both calls are in the batch being retried: neither is stored yet, and the first has waited 1 s.
    expect(shipper.report()).toMatchObject({ queued_calls: 2, queued_bytes: 2 * one, oldest_queued_ms: 1000, sent_calls: 0 });
    // Three more while it waits: the queue's bound is three calls' bytes beside the batch, so none is dropped yet; a fourth drops the oldest queued.
    for (let i = 0; i < 4; i++) enqueue(record());
    expect(shipper.report()).toMatchObject({ queued_calls: 5, queued_bytes: 5 * one, dropped_calls: 1 });
    script = [{ status: 200, body: { recorded: 1, duplicates: 1 } }];
    await clock.advance(100);
    await waitUntil(() => shipper.report().duplicate_calls === 1, "the retried batch stored");
    refuse = () => ({ status: 422, body: { error: "invalid_request", detail: "calls.0.fence: Expected number" } });
    await clock.advance(1000);
    await waitUntil(() => shipper.report().refused_calls === 3, "the next batch refused");
    expect(shipper.report()).toEqual({ queued_calls: 0, queued_bytes: 0, oldest_queued_ms: null, sent_calls: 1, duplicate_calls: 1, dropped_calls: 1, refused_calls: 3 });
  });

  it("sends what is queued at once on close, and gives up at the deadline", async () => {
    start();
    const queued = [enqueue(record()), enqueue(record())];
    await shipper.close(5000);
    expect(received.flatMap((r) => ids(r.batch))).toEqual(queued.map((r) => r.call_id));
    expect(shipper.report().sent_calls).toBe(2);

    // An exchange that keeps failing: the close ends at its deadline and says what was lost.
    script = Array.from({ length: 100 }, () => ({ status: 503, body: { error: "down", detail: "down" } }));
    start();
    enqueue(record());
    const closing = shipper.close(3000);
    await waitUntil(() => received.length === 2, "the first try");
    await waitUntil(() => clock.pending.includes(3000), "the deadline");
    await clock.advance(3000);
    await closing;
    expect(logger.lines.join("\n")).toContain("ledger: stopped with 1 recorded call not sent");
  });

  describe("calls a stop could not send, kept for the next start (spool.ts)", () => {
    const down = (): Answer[] => Array.from({ length: 100 }, () => ({ status: 503, body: { error: "down", detail: "down" } }));
    let dir: ReturnType<typeof tempDir>;
    beforeEach(() => (dir = tempDir()));
    afterEach(() => dir.remove());

    /** Closes the shipper at its deadline while the exchange answers 503, keeping what is left in `spool`. */
    async function closeWhileDown(spool: LedgerSpool): Promise<void> {
      const closing = shipper.close(3000, (calls) => spool.keep(calls));
      await waitUntil(() => clock.pending.includes(3000), "the deadline");
      await clock.advance(3000);
      await closing;
    }

    it("keeps the calls in flight and queued, with their media, and the next start of the engine sends them once", async () => {
      const spool = new LedgerSpool(dir.path, "http://x/e/eng", logger);
      script = down();
      start({ batchCalls: 2 });
      const shot = `data:image/png;base64,${"A".repeat(4000)}`;
      const sha = createHash("sha256").update(shot).digest("hex");
      const withShot = record(`rx-media:sha256:${sha}`);
      const calls = [enqueue(record()), enqueue(record())];
      shipper.enqueue(withShot, Buffer.byteLength(JSON.stringify(withShot)), new Map([[sha, shot]]));
      calls.push(withShot);
      // The first two are the batch being retried, the third waits behind them.
      await waitUntil(() => received.length === 1, "the first try");
      await closeWhileDown(spool);
      expect(logger.lines.join("\n")).toContain("ledger: stopped with 3 recorded calls not sent: kept for the next start to send");
      expect(statSync(spool.path).mode & 0o777).toBe(0o600);

      script = [];
      received = [];
      start();
      const again = new LedgerSpool(dir.path, "http://x/e/eng", logger).take();
      expect(again.map((c) => c.record.call_id)).toEqual(calls.map((c) => c.call_id));
      for (const c of again) shipper.enqueue(c.record, c.bytes, c.media);
      await clock.advance(1000);
      // A try in flight at the stop may still be stored after it: those the exchange counts as duplicates.
      await waitUntil(() => shipper.report().sent_calls + shipper.report().duplicate_calls === 3, "the kept calls stored");
      expect(media.map((m) => m.sha256)).toEqual([sha]);
      expect(existsSync(spool.path)).toBe(false);
      expect(new LedgerSpool(dir.path, "http://x/e/eng", logger).take()).toEqual([]);
    });

    it("gives a start only its own engine's calls and leaves the others' in the file; unreadable lines are dropped, said", async () => {
      const a = new LedgerSpool(dir.path, "http://x/e/a", logger);
      const b = new LedgerSpool(dir.path, "http://x/e/b", logger);
      const ra = record("a");
      const rb = record("b");
      expect(a.keep([{ record: ra, bytes: 10, media: new Map() }])).toBe(true);
      expect(b.keep([{ record: rb, bytes: 20, media: new Map() }])).toBe(true);
      appendFileSync(a.path, '{"engine":"http://x/e/a","record":{"cut');
      const takenA = a.take();
      expect(takenA).toEqual([{ record: ra, bytes: 10, media: new Map() }]);
      expect(logger.lines.join("\n")).toContain(`ledger: 1 line of ${a.path} could not be read and were dropped`);
      expect(a.take()).toEqual([]);
      expect(b.take()).toEqual([{ record: rb, bytes: 20, media: new Map() }]);
      expect(existsSync(a.path)).toBe(false);
    });

    it("counts the calls lost when they cannot be kept (a state directory it cannot write)", async () => {
      const spool = new LedgerSpool(join(dir.path, "no-such-dir"), "http://x/e/eng", logger);
      script = down();
      start();
      enqueue(record());
      await clock.advance(1000);
      await waitUntil(() => received.length === 1, "the first try");
      await closeWhileDown(spool);
      const log = logger.lines.join("\n");
      expect(log).toMatch(/ledger: could not keep 1 recorded call in .*no-such-dir\/ledger-spool\.jsonl for the next start \(.*ENOENT.*\): they are lost/);
      expect(log).toContain("ledger: stopped with 1 recorded call not sent");
      expect(log).not.toContain("kept for the next start");
    });
  });

  it("tries once more on close when it finds a batch waiting out a long retry backoff", async () => {
    start({ backoff: { initialMs: 20_000, maxMs: 30_000, random: () => 0 } });
    script = [{ status: 503, body: { error: "down", detail: "down" } }];
    const queued = enqueue(record());
    await clock.advance(1000);
    await waitUntil(() => received.length === 1, "the first, failed, try");
    await waitUntil(() => clock.pending.includes(10_000), "the retry's backoff");
    // The exchange answers again; the agent is told to stop. SIGTERM sends what is queued.
    const closing = shipper.close(5000);
    await waitUntil(() => received.length === 2, "the try on close");
    await closing;
    expect(received.map((r) => ids(r.batch))).toEqual([[queued.call_id], [queued.call_id]]);
    expect(shipper.report().sent_calls).toBe(1);
    expect(logger.lines.join("\n")).not.toContain("not sent");
  });

  describe("media taken out of records", () => {
    const shot = (n: number): [string, string] => {
      const data = `data:image/png;base64,${"QUJD".repeat(n)}`;
      return [createHash("sha256").update(data).digest("hex"), data];
    };

    it("uploads each medium before the batch that refers to it, once a UTC day, and again the next day", async () => {
      start();
      const [a, dataA] = shot(5000);
      const [b, dataB] = shot(6000);
      shipper.enqueue(record(), 100, new Map([[a, dataA]]));
      shipper.enqueue(record(), 100, new Map([[a, dataA], [b, dataB]]));
      await clock.advance(1000);
      await waitUntil(() => shipper.report().sent_calls === 2, "the first batch");
      expect(order).toEqual([`media ${a.slice(0, 8)}`, `media ${b.slice(0, 8)}`, "batch 2"]);
      expect(media).toEqual([{ sha256: a, data: dataA }, { sha256: b, data: dataB }]);
      // The same medium in a later batch of the day: not uploaded again.
      shipper.enqueue(record(), 100, new Map([[a, dataA]]));
      await clock.advance(1000);
      await waitUntil(() => shipper.report().sent_calls === 3, "the second batch");
      expect(media).toHaveLength(2);
      // A day later: the exchange keeps media under the day of the batches naming them.
      await clock.advance(24 * 3600 * 1000);
      shipper.enqueue(record(), 100, new Map([[a, dataA]]));
      await clock.advance(1000);
      await waitUntil(() => shipper.report().sent_calls === 4, "the next day's batch");
      expect(media.map((m) => m.sha256)).toEqual([a, b, a]);
      expect(order.at(-2)).toBe(`media ${a.slice(0, 8)}`);
    });

    it("uploads a batch's media again when the exchange answers 409 media_missing, then sends the same batch", async () => {
      start();
      const [a, dataA] = shot(5000);
      shipper.enqueue(record(), 100, new Map([[a, dataA]]));
      await clock.advance(1000);
      await waitUntil(() => shipper.report().sent_calls === 1, "the first batch");
      script = [{ status: 409, body: { error: "media_missing", detail: `The batch refers to media not stored today (${a})` } }];
      shipper.enqueue(record(), 100, new Map([[a, dataA]]));
      await clock.advance(1000);
      await waitUntil(() => received.length === 2, "the refused batch");
      await waitUntil(() => clock.pending.length > 0, "the backoff");
      await clock.advance(2000);
      await waitUntil(() => shipper.report().sent_calls === 2, "the batch sent again");
      expect(order).toEqual([`media ${a.slice(0, 8)}`, "batch 1", "batch 1", `media ${a.slice(0, 8)}`, "batch 1"]);
      expect(received[1]!.batch.batch_id).toBe(received[2]!.batch.batch_id);
      expect(shipper.report()).toMatchObject({ refused_calls: 0 });
    });

    // The agent upgraded before its Worker: dropping the batch lost the calls' tokens with their images.
    it("sends batches without their media to an exchange that has no media route, and tries the route again after a while", async () => {
      start();
      mediaRoute = false;
      const [a, dataA] = shot(5000);
      const [b, dataB] = shot(6000);
      shipper.enqueue(record(), 100, new Map([[a, dataA]]));
      await clock.advance(1000);
      await waitUntil(() => shipper.report().sent_calls === 1, "the first batch");
      shipper.enqueue(record(), 100, new Map([[b, dataB]]));
      await clock.advance(1000);
      await waitUntil(() => shipper.report().sent_calls === 2, "the second batch, without trying the route");
      expect(order).toEqual(["media 404", "batch 1", "batch 1"]);
      expect(shipper.report()).toMatchObject({ refused_calls: 0, dropped_calls: 0 });
      expect(logger.lines.filter((l) => l.includes("no media route"))).toHaveLength(1);
      // The Worker is upgraded; ten minutes on, the route is tried again and the media go.
      mediaRoute = true;
      await clock.advance(NO_MEDIA_ROUTE_RETRY_MS);
      shipper.enqueue(record(), 100, new Map([[a, dataA]]));
      await clock.advance(1000);
      await waitUntil(() => shipper.report().sent_calls === 3, "the batch after the upgrade");
      expect(order.slice(3)).toEqual([`media ${a.slice(0, 8)}`, "batch 1"]);
      expect(media).toEqual([{ sha256: a, data: dataA }]);
    });

    // One upload served by the previous Worker version during a gradual deployment answered 404;
    // the current version then refused every batch naming a medium (409 media_missing) while the
    // shipper skipped uploads for 10 minutes, and the calls queued behind waited or were dropped.
    it("uploads again at once when an exchange that answered an upload 404 refuses the batch for its media", async () => {
      start();
      mediaRoute = false;
      const [a, dataA] = shot(5000);
      script = [{ status: 409, body: { error: "media_missing", detail: `The batch refers to media not stored today (${a})` } }];
      shipper.enqueue(record(), 100, new Map([[a, dataA]]));
      await clock.advance(1000);
      await waitUntil(() => received.length === 1, "the refused batch");
      mediaRoute = true;
      await waitUntil(() => clock.pending.length > 0, "the backoff");
      await clock.advance(2000);
      await waitUntil(() => shipper.report().sent_calls === 1, "the batch after its medium");
      expect(order).toEqual(["media 404", "batch 1", `media ${a.slice(0, 8)}`, "batch 1"]);
    });

    it("weighs a batch by its records, not their media: the calls of one second naming screenshots go as one batch", async () => {
      // The media, which go up apart, counted against the batch's 1.5 MB: a call naming a 1 MB
      // screenshot went alone, at once, one POST and one R2 object per call.
      start();
      const sent = Array.from({ length: 5 }, (_, i) => {
        const [d, data] = shot(300_000 + i);
        const r = record(`turn ${i}`);
        shipper.enqueue(r, Buffer.byteLength(JSON.stringify(r)), new Map([[d, data]]));
        return r;
      });
      await settle();
      expect(received).toHaveLength(0);
      await clock.advance(1000);
      await waitUntil(() => shipper.report().sent_calls === 5, "the batch stored");
      expect([received.length, media.length]).toEqual([1, 5]);
      expect(ids(received[0]!.batch)).toEqual(sent.map((r) => r.call_id));
    });

    it("sends the batch when a medium's upload is answered 2xx in a shape it cannot read (a newer exchange's)", async () => {
      // Taken for the batch's own unreadable answer, the batch was never sent, and counted nowhere.
      start();
      const [a, dataA] = shot(5000);
      const put = vi.fn(() => Promise.reject(new ExchangeError(200, UNREADABLE_ANSWER, "the answer has another shape")));
      const client = new EngineClient({ baseUrl: `${server.origin}/e/eng`, token: "trainer-token" });
      shipper = new CallShipper({ post: (b) => client.postCalls(b), putMedia: put, clock, logger, backoff: { initialMs: 200, maxMs: 2000, random: () => 0 } });
      shipper.enqueue(record(), 100, new Map([[a, dataA]]));
      await clock.advance(1000);
      await waitUntil(() => shipper.report().sent_calls === 1, "the batch stored");
      expect([put.mock.calls.length, received.length]).toEqual([1, 1]);
    });

    it("drops a batch whose medium the exchange refuses (a 4xx other than 409), saying why, and goes on", async () => {
      start();
      const [a, dataA] = shot(5000);
      const put = vi.fn(() => Promise.reject(new ExchangeError(422, "media_hash_mismatch", "not that medium")));
      const client = new EngineClient({ baseUrl: `${server.origin}/e/eng`, token: "trainer-token" });
      shipper = new CallShipper({ post: (b) => client.postCalls(b), putMedia: put, clock, logger, backoff: { initialMs: 200, maxMs: 2000, random: () => 0 } });
      shipper.enqueue(record(), 100, new Map([[a, dataA]]));
      await clock.advance(1000);
      await waitUntil(() => shipper.report().refused_calls === 1, "the refusal");
      expect(received).toHaveLength(0);
      expect(logger.lines.join("\n")).toContain("media_hash_mismatch");
    });
  });
});
