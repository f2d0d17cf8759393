/**
 * Talks to one AgentJet runner over ZeroMQ: connect a REQ socket to the address the runner
 * bound (its REP socket), send one string, wait for "ack".
 *
 * REQ sockets are strict send/receive state machines: after a receive times out the socket
 * can neither send again nor be trusted to drop the late reply, so every attempt uses a fresh
 * socket and closes it with linger 0 (an unsent message to a vanished runner must not keep
 * the process or the socket alive).
 */
import { Request } from "zeromq";
import { describeError } from "./log";

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
  timeoutMs: number;
  attempts: number;
  signal?: AbortSignal;
  /** Called before each retry, for a progress line. */
  onRetry?: (attempt: number, why: string) => void;
};

const ADDRESS = /^(tcp|ipc|inproc):\/\/\S+$/;

export function isZmqAddress(addr: string): boolean {
  return ADDRESS.test(addr);
}

export async function sendToRunner(addr: string, message: string, opts: SendOptions): Promise<SendOutcome> {
  if (!isZmqAddress(addr)) {
    return { ok: false, detail: `"${addr}" is not a ZeroMQ address (expected tcp://host:port or ipc:///path)`, attempts: 0, interrupted: false };
  }
  let lastWhy = "";
  for (let attempt = 1; attempt <= opts.attempts; attempt++) {
    if (opts.signal?.aborted) return { ok: false, detail: "the agent is shutting down", attempts: attempt - 1, interrupted: true };
    if (attempt > 1) opts.onRetry?.(attempt, lastWhy);
    const result = await oneAttempt(addr, message, opts.timeoutMs, opts.signal);
    if (result.kind === "ack") return { ok: true, detail: `runner at ${addr} acked${attempt > 1 ? ` on attempt ${attempt}` : ""}`, attempts: attempt, interrupted: false };
    if (result.kind === "interrupted") return { ok: false, detail: "the agent is shutting down", attempts: attempt, interrupted: true };
    if (result.kind === "fatal") return { ok: false, detail: result.why, attempts: attempt, interrupted: false };
    lastWhy = result.why;
  }
  return {
    ok: false,
    detail:
      `runner at ${addr} did not ack in ${opts.attempts} attempt${opts.attempts === 1 ? "" : "s"} of ${opts.timeoutMs / 1000} s each ` +
      `(${lastWhy}); it is gone, or it already took this message and stopped listening`,
    attempts: opts.attempts,
    interrupted: false,
  };
}

type Attempt = { kind: "ack" } | { kind: "retry"; why: string } | { kind: "fatal"; why: string } | { kind: "interrupted" };

async function oneAttempt(addr: string, message: string, timeoutMs: number, signal: AbortSignal | undefined): Promise<Attempt> {
  const sock = new Request({ linger: 0, sendTimeout: timeoutMs, receiveTimeout: timeoutMs });
  // Closing the socket makes a pending send/receive reject, which ends the attempt promptly.
  const onAbort = (): void => sock.close();
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    try {
      sock.connect(addr);
    } catch (e) {
      return { kind: "fatal", why: `cannot connect to ${addr}: ${describeError(e)}` };
    }
    await sock.send(message);
    const [reply] = await sock.receive();
    const text = reply?.toString("utf8") ?? "";
    if (text === RUNNER_ACK) return { kind: "ack" };
    return { kind: "fatal", why: `the peer at ${addr} answered ${JSON.stringify(text.slice(0, 80))} instead of "ack": is an AgentJet runner listening there?` };
  } catch (e) {
    if (signal?.aborted) return { kind: "interrupted" };
    const code = (e as { code?: unknown }).code;
    if (code === "EAGAIN") return { kind: "retry", why: `no ack within ${timeoutMs / 1000} s` };
    return { kind: "retry", why: describeError(e) };
  } finally {
    signal?.removeEventListener("abort", onAbort);
    if (!sock.closed) sock.close();
  }
}
