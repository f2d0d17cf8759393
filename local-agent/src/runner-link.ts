/**
 * Talks to one AgentJet runner over ZeroMQ: connect a REQ socket to the address the runner
 * bound (its REP socket), send one string, wait for "ack".
 *
 * One socket per send, in relaxed mode (ZMQ_REQ_RELAXED), for all its attempts: when an
 * attempt's wait for the ack runs out, the next sends the message again on the same socket,
 * and the receive started by the first keeps waiting. An ack to any attempt counts: AgentJet's
 * runner takes a result, replies "ack" once and stops listening, so its ack to an attempt that
 * timed out is the only one that will ever come; a socket per attempt, closed when its wait ran
 * out, dropped it and reported a result the runner had as undeliverable. (libzmq discards a
 * reply still unread in the pipe when a relaxed REQ sends again, so each attempt first lets
 * the pending receive take a reply that is already there.) Not ZMQ_REQ_CORRELATE: it would
 * drop exactly that late ack. Not ZMQ_IMMEDIATE: with it libzmq also drops an unread reply
 * when the peer disconnects, and the runner closes its socket right after its ack.
 *
 * The runner does not deduplicate. A retry's copy reaches it when the runner is slow to ack
 * (or binds late: copies queued before it bound may be delivered, though libzmq drops most of
 * them when a relaxed REQ sends again). A result is still taken once: the runner stops
 * listening after the first and the copies die with its REP socket. A context reset may be
 * done twice, as one the engine hands out again is, which is harmless. The socket is closed
 * with linger 0 when the send ends: an unsent message to a vanished runner must not keep the
 * process or the socket alive. (Keeping a socket per attempt open instead would multiply the
 * sockets a slow or dead runner's deliveries hold by deliveryAttempts; zeromq's context allows
 * 1,023 in all, and a send waits for one of the agent's (zmq-sockets.ts).)
 */
import type { Request } from "zeromq";
import { realClock, type Clock } from "./clock";
import { describeError } from "./log";
import { requestSocket } from "./zmq-sockets";

/** The reset message AgentJet's runner understands; it replies "ack" and keeps listening. */
export const RESET_CONTEXT_TRACKER = "RUNNER.SPECIAL.RESET_CONTEXT_TRACKER";
/** The runner's only reply. */
export const RUNNER_ACK = "ack";

export type SendOutcome = {
  ok: boolean;
  /** Plain words for the operator; becomes the command ack's detail. */
  detail: string;
  attempts: number;
  /** True when no attempt could be made or finished because the agent is shutting down. */
  interrupted: boolean;
};

export type SendOptions = {
  /** How long each attempt waits for an ack (to it or to an earlier attempt) before the next one. */
  timeoutMs: number;
  attempts: number;
  signal?: AbortSignal;
  /** Called before each retry, for a progress line. */
  onRetry?: (attempt: number, why: string) => void;
  /** Times the attempts' waits; the real clock by default. */
  clock?: Clock;
};

const TCP = /^tcp:\/\/\S+:(\d{1,5})$/;
const IPC = /^ipc:\/\/\S+$/;

/**
 * An address a runner in another process can bind and the agent connect to: tcp://host:port
 * with a port of 1 to 65535, or ipc://path. ZeroMQ's connect() takes port 0, a port past 65535
 * and inproc:// (the agent's own process only) too, and every send to one waits out its deadline.
 */
export function isZmqAddress(addr: string): boolean {
  const tcp = TCP.exec(addr);
  if (tcp !== null) return Number(tcp[1]) >= 1 && Number(tcp[1]) <= 65_535;
  return IPC.test(addr);
}

/** How the socket's receive ended. */
type Reply = { kind: "ack" } | { kind: "other"; text: string } | { kind: "failed"; why: string };

export async function sendToRunner(addr: string, message: string, opts: SendOptions): Promise<SendOutcome> {
  if (!isZmqAddress(addr)) {
    return { ok: false, detail: `"${addr}" is not a ZeroMQ address (expected tcp://host:port or ipc:///path)`, attempts: 0, interrupted: false };
  }
  const clock = opts.clock ?? realClock;
  const interrupted = (attempts: number): SendOutcome => ({ ok: false, detail: "the agent is shutting down", attempts, interrupted: true });
  const held = await requestSocket({ linger: 0, relaxed: true, sendTimeout: opts.timeoutMs }, opts.signal);
  if (held === null) return interrupted(0);
  const { sock } = held;
  // Closing the socket makes a pending send/receive end, which ends the send promptly.
  const onAbort = (): void => sock.close();
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    try {
      sock.connect(addr);
    } catch (e) {
      return { ok: false, detail: `cannot connect to ${addr}: ${describeError(e)}`, attempts: 1, interrupted: false };
    }
    /** The socket's outstanding receive, started after the first send and kept across the attempts; `got` once it ended. */
    let pending: Promise<Reply> | null = null;
    let got: Reply | null = null;
    let lastWhy = "";
    for (let n = 1; n <= opts.attempts; n++) {
      if (opts.signal?.aborted) return interrupted(n - 1);
      if (n > 1) opts.onRetry?.(n, lastWhy);
      try {
        await sock.send(message);
      } catch (e) {
        if (opts.signal?.aborted) return interrupted(n);
        lastWhy = (e as { code?: unknown }).code === "EAGAIN" ? `could not send within ${opts.timeoutMs / 1000} s` : describeError(e);
        continue;
      }
      if (pending === null) {
        got = null;
        pending = receiveReply(sock).then((r) => (got = r));
      }
      const waited = new AbortController();
      // The wait's own signal only: an abort closes the socket (onAbort), which ends `pending`, and a
      // signal tied to the agent's lifetime one on every attempt would be kept as long as it lives.
      const timedOut = clock.sleep(opts.timeoutMs, waited.signal).then(() => null);
      let reply = await Promise.race([pending, timedOut]);
      waited.abort();
      if (reply === null) {
        // Let a reply that is already in the socket be taken before the next send discards it.
        await new Promise((r) => setImmediate(r));
        reply = got;
      }
      if (reply?.kind === "ack") {
        return { ok: true, detail: `runner at ${addr} acked${n > 1 ? ` during attempt ${n} (this one or an earlier one)` : ""}`, attempts: n, interrupted: false };
      }
      if (opts.signal?.aborted) return interrupted(n);
      if (reply?.kind === "other") {
        return {
          ok: false,
          detail: `the peer at ${addr} answered ${JSON.stringify(reply.text.slice(0, 80))} instead of "ack": is an AgentJet runner listening there?`,
          attempts: n,
          interrupted: false,
        };
      }
      if (reply === null) lastWhy = `no ack within ${opts.timeoutMs / 1000} s`;
      else {
        lastWhy = reply.why;
        pending = null; // the next attempt receives again
      }
    }
    return {
      ok: false,
      detail:
        `runner at ${addr} did not ack in ${opts.attempts} attempt${opts.attempts === 1 ? "" : "s"} of ${opts.timeoutMs / 1000} s each ` +
        `(${lastWhy}); it is gone, or it already took this message and stopped listening`,
      attempts: opts.attempts,
      interrupted: false,
    };
  } finally {
    opts.signal?.removeEventListener("abort", onAbort);
    held.release();
  }
}

/** Waits, without a deadline of its own, for the socket's reply; never rejects. */
async function receiveReply(sock: Request): Promise<Reply> {
  try {
    const [reply] = await sock.receive();
    const text = reply?.toString("utf8") ?? "";
    return text === RUNNER_ACK ? { kind: "ack" } : { kind: "other", text };
  } catch (e) {
    return { kind: "failed", why: describeError(e) };
  }
}
