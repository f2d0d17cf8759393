/**
 * The command loop and the Dispatcher together: how much the agent takes on. The real loop and
 * Dispatcher, real ZeroMQ REQ sockets to a runner address nobody listens on (or to a live REP
 * peer); only the exchange is a stand-in, a Worker with a queue of deliver commands that hands
 * out as many as each poll asks for (at most 100, as the real one does).
 */
import { afterEach, describe, expect, it } from "vitest";
import type { Command } from "../../src/protocol";
import type { Acker } from "../src/acker";
import { commandLoop } from "../src/command-loop";
import { Dispatcher } from "../src/dispatcher";
import type { EngineLink, PolledCommand } from "../src/engine-link";
import type { Logger } from "../src/log";
import type { Outcome, OutcomeJournal } from "../src/outcome-journal";
import type { Reachability } from "../src/reachability";
import type { TrainerSupervisor } from "../src/trainer";
import { repPeer } from "./support/rep-peer";
import { tempDir } from "./support/temp";
import { waitUntil } from "./support/wait";

const quiet: Logger = { info: () => undefined, warn: () => undefined, error: () => undefined };
const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

type Setup = {
  concurrency: number;
  maxBacklog: number;
  /** Passed as maxBacklogBytes. */
  maxBacklogBytes: number;
  payloadBytes: number;
  /** Deliver commands the stand-in Worker has; it then holds each poll open until the agent stops. */
  commands: number;
  /** The runner's address; default: an ipc path nobody binds (no ack ever comes, no delivery ends within a test). */
  runner?: string;
};

/** Runs the real loop and Dispatcher against the stand-in Worker; what they took on is read from the returned object. */
function start(o: Setup) {
  const dir = tempDir();
  const stop = new AbortController();
  const runner = o.runner ?? `ipc://${dir.path}/dead-runner.sock`;
  const seen = { polls: 0, limits: [] as number[], roomAtPoll: [] as number[], handed: 0, finished: 0, heldPeak: 0, heldBytesPeak: 0, outcomes: [] as Outcome[], waitingForRoom: false };
  let heldBytes = 0;
  const bytesOf = new Map<number, number>();
  let seq = 0;
  let dispatcher: Dispatcher;
  const link = {
    pollCommands: async (_wait: number, limit: number): Promise<PolledCommand[]> => {
      seen.polls++;
      seen.limits.push(limit);
      seen.roomAtPoll.push(o.maxBacklog - dispatcher.backlog);
      if (seq >= o.commands) {
        await new Promise((r) => stop.signal.addEventListener("abort", r, { once: true }));
        return [];
      }
      const batch = Array.from({ length: Math.min(limit, 100, o.commands - seq) }, (): PolledCommand => {
        seq++;
        // A distinct string per command, as JSON.parse of a poll answer makes them.
        const payload = JSON.stringify({ reward: 1, metadata: { task_id: `t${seq}` }, blob: String(seq).padEnd(o.payloadBytes, "x") });
        bytesOf.set(seq, payload.length);
        heldBytes += payload.length;
        const command: Command = { seq, attempt: 1, created_at: Date.now() / 1000, body: { kind: "deliver", episode_uuid: `ep-${seq % 4}`, fence: 1, zmq_listen_result_addr: runner, payload } };
        return { ok: true, command, incarnation: null };
      });
      seen.handed += batch.length;
      seen.heldPeak = Math.max(seen.heldPeak, seen.handed - seen.finished);
      seen.heldBytesPeak = Math.max(seen.heldBytesPeak, heldBytes);
      return batch;
    },
  } as unknown as EngineLink;
  const acker = {
    finish: async (s: number, _i: unknown, outcome: Outcome) => {
      seen.finished++;
      heldBytes -= bytesOf.get(s) ?? 0;
      seen.outcomes.push(outcome);
    },
    send: async () => undefined,
  } as unknown as Acker;
  const reach = { succeeded: () => undefined, failed: () => undefined, pause: () => Promise.resolve() } as unknown as Reachability;
  dispatcher = new Dispatcher({
    trainer: {} as TrainerSupervisor,
    acker,
    journal: { get: () => undefined } as unknown as OutcomeJournal,
    logger: quiet,
    // Against the dead runner each delivery waits out 3 attempts of 10 s (the defaults): none ends within a test.
    delivery: { timeoutMs: 10_000, attempts: 3, concurrency: o.concurrency },
    stop: stop.signal,
    version: "test",
  });
  // Whether the loop is waiting for room (a check that does not wait resolves within microtasks).
  const roomFor = dispatcher.roomFor.bind(dispatcher);
  dispatcher.roomFor = ((limit: Parameters<Dispatcher["roomFor"]>[0]) => {
    seen.waitingForRoom = true;
    return roomFor(limit).finally(() => (seen.waitingForRoom = false));
  }) as Dispatcher["roomFor"];
  const loop = commandLoop({ link, dispatcher, reach, logger: quiet, backoff: { baseMs: 10, maxMs: 100 } as never, stop: stop.signal, waitSeconds: 0, maxBacklog: o.maxBacklog, maxBacklogBytes: o.maxBacklogBytes });
  cleanups.push(async () => {
    stop.abort();
    await loop;
    dir.remove();
  });
  return { seen, dispatcher };
}

describe("the command loop's backlog", () => {
  it("asks for no more commands than there is room for, so it holds at most maxBacklog (4 x deliveryConcurrency) of them", async () => {
    const { seen, dispatcher } = start({ concurrency: 8, maxBacklog: 32, maxBacklogBytes: 2 ** 40, payloadBytes: 1024, commands: 1000 });
    await waitUntil(() => seen.waitingForRoom && seen.polls > 0, "the loop to wait for room");
    expect(seen.heldPeak).toBe(32);
    expect(dispatcher.backlog).toBe(32);
    expect(seen.limits.every((limit, i) => limit <= seen.roomAtPoll[i]!)).toBe(true);
    expect(seen.limits[0]).toBe(32); // and as many as there is room for
  });

  it("stops polling at deliveryQueueBytes of payloads for a dead runner, asking for only as many as fit at the largest size a command can be", async () => {
    const payloadBytes = 256 * 1024;
    const { seen, dispatcher } = start({ concurrency: 8, maxBacklog: 32, maxBacklogBytes: 1024 * 1024, payloadBytes, commands: 1000 });
    await waitUntil(() => seen.waitingForRoom && seen.polls > 0, "the loop to wait for room");
    // 1 MiB of ~256 KiB payloads: four, the last one just over (at most one payload over the budget).
    expect(seen.heldBytesPeak).toBeLessThan(1024 * 1024 + payloadBytes + 100);
    expect(dispatcher.backlog).toBe(4);
    expect(dispatcher.backlogBytes).toBe(seen.heldBytesPeak);
    expect(seen.limits).toEqual([1, 1, 1, 1]); // 1 MiB has no room for two 1.9 MB commands
  });

  it("still delivers a payload larger than the whole budget, one at a time, without deadlocking", async () => {
    const peer = await repPeer();
    cleanups.push(peer.close);
    const { seen, dispatcher } = start({ concurrency: 8, maxBacklog: 32, maxBacklogBytes: 64 * 1024, payloadBytes: 256 * 1024, commands: 5, runner: peer.addr });
    await waitUntil(() => seen.finished === 5, "all five results to be delivered");
    expect(seen.outcomes.every((o) => o.ok)).toBe(true);
    expect(peer.received).toHaveLength(5);
    expect(seen.heldPeak).toBe(1);
    expect(dispatcher.backlogBytes).toBe(0);
  });
});
