/**
 * A Node REP peer (zeromq) that records every message it receives and answers each one. Unlike
 * an AgentJet runner it never stops listening after a result, so a result delivered twice is
 * received twice: the probe for "exactly once".
 */
import { Reply } from "zeromq";

export type RepPeer = { addr: string; received: string[]; close(): void };

/** Binds at `addr` (default: a free tcp port) and answers `reply` (after `delayMs`). */
export async function repPeer(opts: { reply?: string; delayMs?: number; addr?: string } = {}): Promise<RepPeer> {
  const sock = new Reply({ linger: 0, ipv6: true });
  await sock.bind(opts.addr ?? "tcp://127.0.0.1:*");
  const received: string[] = [];
  void (async () => {
    try {
      for await (const [msg] of sock) {
        received.push(msg?.toString("utf8") ?? "");
        if (opts.delayMs) await new Promise((r) => setTimeout(r, opts.delayMs));
        await sock.send(opts.reply ?? "ack");
      }
    } catch {
      // closed
    }
  })();
  const close = (): void => {
    if (!sock.closed) sock.close();
  };
  return { addr: sock.lastEndpoint as string, received, close };
}
