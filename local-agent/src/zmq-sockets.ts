/**
 * The agent's ZeroMQ REQ sockets. zeromq's one context refuses a socket past 1,023 (libzmq's
 * ZMQ_MAX_SOCKETS), and `new Request()` then throws "Too many open file descriptors". Deliveries
 * to runners (up to --delivery-concurrency at once, each holding its socket for all its
 * attempts) and the gateway's calls to AgentJet runners draw on that one context: a result for a
 * live runner failed when dead runners' deliveries held the sockets. Each now takes its socket
 * from here, and waits for one while all are held, first come, first served.
 */
import { Request } from "zeromq";
import { Semaphore } from "./semaphore";

/** Below the context's 1,023, which libzmq's own sockets share. */
export const MAX_REQUEST_SOCKETS = 1000;

/**
 * How long a socket is waited for while the context still counts sockets closed: libzmq's reaper
 * frees them a moment after close(), so a burst of deliveries ending and beginning can meet the
 * limit for that moment.
 */
const REAPED_WITHIN_MS = 2000;
const REAP_POLL_MS = 5;

async function opened(options: ConstructorParameters<typeof Request>[0]): Promise<Request> {
  for (let waited = 0; ; waited += REAP_POLL_MS) {
    try {
      // Dual stack: a runner's address may be IPv6 (tcp://[::1]:port, which isZmqAddress takes),
      // which a socket without ipv6 never reaches; IPv4 addresses are reached all the same.
      return new Request({ ipv6: true, ...options });
    } catch (e) {
      if ((e as { code?: unknown }).code !== "EMFILE" || waited >= REAPED_WITHIN_MS) throw e;
      await new Promise((r) => setTimeout(r, REAP_POLL_MS));
    }
  }
}

const sockets = new Semaphore(MAX_REQUEST_SOCKETS);

/** A REQ socket and the release of its place (which closes it if it is still open). */
export type HeldSocket = { sock: Request; release(): void };

/** A REQ socket made with `options` once one may be opened; null when `signal` aborts first. */
export async function requestSocket(options: ConstructorParameters<typeof Request>[0], signal?: AbortSignal): Promise<HeldSocket | null> {
  if (signal?.aborted) return null;
  const permit = sockets.acquire();
  let onAbort = (): void => {};
  const aborted = new Promise<null>((resolve) => {
    onAbort = () => resolve(null);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
  let release: (() => void) | null;
  try {
    release = await Promise.race([permit, aborted]);
  } finally {
    // Removed on every path: `signal` is often the agent's own, which lives as long as it does.
    signal?.removeEventListener("abort", onAbort);
  }
  if (release === null) {
    void permit.then((r) => r());
    return null;
  }
  const free = release;
  let sock: Request;
  try {
    sock = await opened(options);
  } catch (e) {
    free();
    throw e;
  }
  return {
    sock,
    release: () => {
      if (!sock.closed) sock.close();
      free();
    },
  };
}
