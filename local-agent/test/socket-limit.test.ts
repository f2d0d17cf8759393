/**
 * zeromq's context refuses a socket past 1,023, and every delivery holds one for all its
 * attempts: with --delivery-concurrency above that (it accepts up to 10,000) and dead runners'
 * deliveries holding the sockets, a result for a live runner failed "unexpectedly" and was
 * handed out again. Deliveries and the gateway's calls to runners now take their sockets from
 * one pool below the limit (zmq-sockets.ts), and wait for one: every delivery ends with its
 * outcome, the live runner's delivered.
 */
import { afterEach, describe, expect, it } from "vitest";
import type { Command } from "../../src/protocol";
import type { PolledCommand } from "../src/engine-link";
import { recordingDispatcher } from "./support/dispatcher";
import { MemoryLogger } from "./support/logger";
import { PyRunner } from "./support/py-runner";
import { tempDir } from "./support/temp";
import { waitUntil } from "./support/wait";
import { askRunner } from "../src/gateway/agentjet";
import { MAX_REQUEST_SOCKETS, requestSocket } from "../src/zmq-sockets";

const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe("deliveries past zeromq's socket limit", () => {
  it("a live runner's result is still delivered while many deliveries to dead runners are in flight (deliveryConcurrency 1100)", async () => {
    const dir = tempDir();
    cleanups.push(() => dir.remove());
    const stop = new AbortController();
    cleanups.push(() => stop.abort());
    const live = new PyRunner({ ipcDir: dir.path, episodes: ["ep-live"], register: false });
    cleanups.push(() => live.kill());
    await live.waitFor("listening", "ep-live");

    const logger = new MemoryLogger();
    // Each dead runner's delivery holds its socket for 2 s; a concurrency the config accepts (at most 10,000).
    const { dispatcher, acked } = recordingDispatcher({ logger, delivery: { timeoutMs: 2000, attempts: 1, concurrency: 1100 }, stop: stop.signal });
    const outcomeOf = (seq: number) => acked.find((a) => a.seq === seq)?.outcome;
    const deliver = (seq: number, episode: string, addr: string): PolledCommand => {
      const command: Command = { seq, attempt: 1, created_at: Date.now() / 1000, body: { kind: "deliver", episode_uuid: episode, fence: 1, zmq_listen_result_addr: addr, payload: JSON.stringify({ reward: 1, metadata: { task_id: `t${seq}` } }) } };
      return { ok: true, command, incarnation: null };
    };
    const DEAD = 1050;
    for (let seq = 1; seq <= DEAD; seq++) dispatcher.submit(deliver(seq, `dead-${seq}`, `ipc://${dir.path}/dead-${seq}.sock`));
    const liveSeq = DEAD + 1;
    dispatcher.submit(deliver(liveSeq, "ep-live", live.addr("ep-live")));

    // Every command ends: the dead runners' deliveries as undeliverable after their 2 s, the live one as delivered.
    await waitUntil(() => dispatcher.backlog === 0, "every delivery to end", 60_000);
    expect(outcomeOf(liveSeq)).toMatchObject({ ok: true });
    expect(logger.lines.filter((l) => l.includes("failed unexpectedly")).length).toBe(0);
    expect(live.of("result", "ep-live")).toHaveLength(1);
    expect(acked.length).toBe(DEAD + 1);
    for (let seq = 1; seq <= DEAD; seq++) expect(outcomeOf(seq)?.detail).toMatch(/did not ack in 1 attempt/);
  }, 90_000);

  it("a gateway call waits for a socket only until its deadline, then makes its attempts once one is free", async () => {
    const dir = tempDir();
    cleanups.push(() => dir.remove());
    const held = await Promise.all(Array.from({ length: MAX_REQUEST_SOCKETS }, () => requestSocket({ linger: 0 })));
    cleanups.push(() => held.forEach((h) => h?.release()));
    const addr = `ipc://${dir.path}/nobody.sock`;
    const ask = () => askRunner(addr, "{}", { deadlineAt: Date.now() + 300, receiveTimeoutMs: 100, signal: new AbortController().signal });
    // Every socket held: the call ends at its deadline without an attempt.
    expect(await ask()).toMatchObject({ kind: "deadline", attempts: 0 });
    held.forEach((h) => h?.release());
    // Sockets free: it tries, receive timeout after receive timeout, until its deadline.
    expect(((await ask()) as { attempts: number }).attempts).toBeGreaterThanOrEqual(2);
  });
});
