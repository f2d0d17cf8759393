/**
 * ZeroMQ delivery against real sockets: a Node REP peer (zeromq) and a Python runner (pyzmq)
 * that speaks AgentJet's exact messages.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { RESET_CONTEXT_TRACKER, sendToRunner } from "../src/runner-link";
import { ManualClock } from "./support/manual-clock";
import { PyRunner } from "./support/py-runner";
import { repPeer as startPeer, type RepPeer } from "./support/rep-peer";
import { tempDir } from "./support/temp";
import { waitUntil } from "./support/wait";

let dir: ReturnType<typeof tempDir>;
const cleanups: Array<() => void> = [];

beforeEach(() => {
  dir = tempDir();
});
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
  dir.remove();
});

/** A REP peer closed after the test. */
async function repPeer(opts: Parameters<typeof startPeer>[0] = {}): Promise<RepPeer> {
  const peer = await startPeer(opts);
  cleanups.push(peer.close);
  return peer;
}

/** Ends the current attempt's wait for an ack, once it waits (unless `sending` has ended). */
async function timeOutAttempt(clock: ManualClock, ms: number, sending?: Promise<unknown>): Promise<void> {
  let ended = false;
  void sending?.then(() => (ended = true));
  await waitUntil(() => ended || clock.pending.length > 0, "an attempt to wait for its ack");
  if (!ended) await clock.advance(ms);
}

function runner(o: Omit<ConstructorParameters<typeof PyRunner>[0], "ipcDir">): PyRunner {
  const r = new PyRunner({ ipcDir: dir.path, register: false, ...o });
  cleanups.push(() => r.kill());
  return r;
}

describe("sendToRunner with a Node REP peer", () => {
  it("delivers one string, intact, over tcp (IPv4 and IPv6) and ipc", async () => {
    const payload = JSON.stringify({ reward: 0.5, is_success: true, metadata: { task_id: "t1", note: "ünïcödé ✓", big: "x".repeat(1 << 20) }, log_metrics: {} });
    for (const addr of ["tcp://127.0.0.1:*", "tcp://[::1]:*", `ipc://${dir.path}/peer.sock`]) {
      const peer = await repPeer({ addr });
      const out = await sendToRunner(peer.addr, payload, { timeoutMs: 2000, attempts: 1 });
      expect(out).toMatchObject({ ok: true, attempts: 1, interrupted: false });
      expect(peer.received).toEqual([payload]);
    }
  });

  it("reports a runner that is not there after its attempts, each sending again", async () => {
    const peer = await repPeer();
    peer.close(); // the port is now free: nobody listens
    const retries: string[] = [];
    const t0 = Date.now();
    const out = await sendToRunner(peer.addr, "{}", { timeoutMs: 150, attempts: 3, onRetry: (n, why) => retries.push(`${n}: ${why}`) });
    // Three full waits of 150 ms; Node's timers may fire up to 1 ms early on Date.now()'s clock.
    expect(Date.now() - t0).toBeGreaterThanOrEqual(3 * 150 - 3);
    expect(out.ok).toBe(false);
    expect(out.attempts).toBe(3);
    expect(out.detail).toBe(
      `runner at ${peer.addr} did not ack in 3 attempts of 0.15 s each (no ack within 0.15 s); it is gone, or it already took this message and stopped listening`,
    );
    expect(retries).toEqual(["2: no ack within 0.15 s", "3: no ack within 0.15 s"]);
  });

  it("reaches a runner that binds late, on a retry; a copy queued before it bound may reach it too", async () => {
    const addr = `ipc://${dir.path}/late.sock`;
    const clock = new ManualClock();
    const sending = sendToRunner(addr, "late", { timeoutMs: 300, attempts: 5, clock });
    await timeOutAttempt(clock, 300);
    const peer = await repPeer({ addr });
    const out = await sending;
    expect(out).toMatchObject({ ok: true, attempts: 2 });
    // This peer keeps listening, unlike AgentJet's runner (which takes one result: see below).
    expect(peer.received.length === 1 || peer.received.length === 2).toBe(true);
    expect(new Set(peer.received)).toEqual(new Set(["late"]));
  });

  it("refuses addresses that are not ZeroMQ endpoints, and fails fast on ones zmq cannot parse", async () => {
    expect(await sendToRunner("http://127.0.0.1:1", "{}", { timeoutMs: 100, attempts: 3 })).toEqual({
      ok: false,
      detail: '"http://127.0.0.1:1" is not a ZeroMQ address (expected tcp://host:port or ipc:///path)',
      attempts: 0,
      interrupted: false,
    });
    // No port, or one no runner can bind: refused before any socket.
    for (const addr of ["tcp://no-port-here", "tcp://127.0.0.1:0", "inproc://runner"]) {
      expect(await sendToRunner(addr, "{}", { timeoutMs: 100, attempts: 3 }), addr).toMatchObject({ ok: false, attempts: 0, detail: expect.stringContaining("is not a ZeroMQ address") });
    }
    // One ZeroMQ cannot use (an ipc path longer than a socket address holds) fails at its first try.
    const long = `ipc:///tmp/${"x".repeat(200)}.sock`;
    const bad = await sendToRunner(long, "{}", { timeoutMs: 100, attempts: 3 });
    expect(bad).toMatchObject({ ok: false, attempts: 1 });
    expect(bad.detail.startsWith(`cannot connect to ${long}: `)).toBe(true);
  });

  it("does not take a reply other than ack for an ack", async () => {
    const peer = await repPeer({ reply: "nope" });
    const out = await sendToRunner(peer.addr, "{}", { timeoutMs: 1000, attempts: 3 });
    expect(out).toMatchObject({ ok: false, attempts: 1 });
    expect(out.detail).toMatch(/answered "nope" instead of "ack": is an AgentJet runner listening there\?/);
  });

  it("stops promptly when the agent shuts down, without claiming a result", async () => {
    const peer = await repPeer();
    peer.close();
    const stop = new AbortController();
    setTimeout(() => stop.abort(), 100);
    const t0 = Date.now();
    const out = await sendToRunner(peer.addr, "{}", { timeoutMs: 10_000, attempts: 3, signal: stop.signal });
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(out).toMatchObject({ ok: false, interrupted: true });
  });
});

describe("sendToRunner with AgentJet's runner protocol in Python (pyzmq)", () => {
  it("delivers a result: the runner acks once and stops listening, so a second delivery times out instead of hanging", async () => {
    const r = runner({ episodes: ["ep-1"] });
    await r.waitFor("listening", "ep-1");
    const output = { reward: 1, is_success: true, metadata: { task_id: "task-7" }, log_metrics: { turns: 3 } };
    const first = await sendToRunner(r.addr("ep-1"), JSON.stringify(output), { timeoutMs: 5000, attempts: 1 });
    expect(first.ok).toBe(true);
    expect((await r.waitFor("result", "ep-1")).payload).toEqual(output);
    await r.waitFor("closed", "ep-1");

    const again = await sendToRunner(r.addr("ep-1"), JSON.stringify(output), { timeoutMs: 200, attempts: 2 });
    expect(again.ok).toBe(false);
    expect(again.detail).toMatch(/did not ack in 2 attempts .* already took this message and stopped listening/);
    expect(r.of("result", "ep-1")).toHaveLength(1);
  });

  it("resets the context tracker and keeps listening, over tcp", async () => {
    const r = runner({ episodes: ["ep-2"], tcp: true });
    await r.waitFor("listening", "ep-2");
    const addr = r.addr("ep-2");
    expect(addr).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
    expect((await sendToRunner(addr, RESET_CONTEXT_TRACKER, { timeoutMs: 5000, attempts: 1 })).ok).toBe(true);
    expect((await sendToRunner(addr, RESET_CONTEXT_TRACKER, { timeoutMs: 5000, attempts: 1 })).ok).toBe(true); // a redelivered reset is harmless
    // The runner prints what it saw before it acks, but its stdout may reach the test after the ack.
    await waitUntil(() => r.of("reset", "ep-2").length === 2, "the runner to report both resets");
    expect((await sendToRunner(addr, JSON.stringify({ reward: 0 }), { timeoutMs: 5000, attempts: 1 })).ok).toBe(true);
    expect((await r.waitFor("result", "ep-2")).payload).toEqual({ reward: 0 });
  });

  it("counts an ack that comes after its attempt timed out as delivered, and the runner takes the result once", async () => {
    // AgentJet's runner acks once and stops listening: this late ack, to attempt 1, is the only one there will be.
    const r = runner({ episodes: ["ep-late"], ackDelay: 0.3 });
    await r.waitFor("listening", "ep-late");
    const clock = new ManualClock();
    const retries: number[] = [];
    const sending = sendToRunner(r.addr("ep-late"), JSON.stringify({ reward: 1 }), { timeoutMs: 100, attempts: 2, clock, onRetry: (n) => retries.push(n) });
    await r.waitFor("result", "ep-late"); // the runner has it, and acks in 0.3 s
    await timeOutAttempt(clock, 100, sending); // attempt 1 times out first; attempt 2 sends a copy
    const out = await sending;
    expect(out).toEqual({ ok: true, detail: `runner at ${r.addr("ep-late")} acked during attempt 2 (this one or an earlier one)`, attempts: 2, interrupted: false });
    expect(retries).toEqual([2]);
    // Attempt 2's copy reached the runner's socket too, and died with it.
    await r.waitFor("closed", "ep-late");
    expect(r.of("result", "ep-late")).toHaveLength(1);
  });

  it("a runner that binds after retries queued copies of a result takes it once", async () => {
    const clock = new ManualClock();
    const addr = `ipc://${dir.path}/ep-bound-late.sock`; // where runner.py binds this episode
    const sending = sendToRunner(addr, JSON.stringify({ reward: 1 }), { timeoutMs: 100, attempts: 3, clock });
    await timeOutAttempt(clock, 100);
    await timeOutAttempt(clock, 100); // three copies sent, nobody listening yet
    const r = runner({ episodes: ["ep-bound-late"] });
    const out = await sending;
    expect(out).toMatchObject({ ok: true, attempts: 3 });
    await r.waitFor("closed", "ep-bound-late");
    expect(r.of("result", "ep-bound-late")).toHaveLength(1);
  });

  it("waits for a runner that acks slowly, within the deadline", async () => {
    const r = runner({ episodes: ["ep-3"], ackDelay: 0.4 });
    await r.waitFor("listening", "ep-3");
    const out = await sendToRunner(r.addr("ep-3"), JSON.stringify({ reward: 1 }), { timeoutMs: 3000, attempts: 1 });
    expect(out.ok).toBe(true);
  });
});
