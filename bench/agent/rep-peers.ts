/**
 * Runner stand-ins for the benchmark: REP sockets that ack every message at once and keep
 * listening (like an AgentJet runner receiving resets), recording when each message arrived
 * and when its ack left, by the episode named in the payload.
 */
import { Reply } from "zeromq";

export type Ack = { episode: string; receivedAt: number; ackedAt: number };

export class RepPeers {
  readonly addrs: string[] = [];
  readonly acks: Ack[] = [];
  count = 0;
  private readonly socks: Reply[] = [];
  /**
   * `record` false keeps only the count, not each ack (for long runs); `onMessage` sees each
   * message's text as it arrives, before its ack leaves.
   */
  constructor(
    private readonly record = true,
    private readonly onMessage?: (text: string, receivedAt: number) => void,
  ) {}

  async start(n: number): Promise<void> {
    for (let i = 0; i < n; i++) {
      const sock = new Reply({ linger: 0 });
      await sock.bind("tcp://127.0.0.1:*");
      this.socks.push(sock);
      this.addrs.push(sock.lastEndpoint as string);
      void this.serve(sock);
    }
  }

  private async serve(sock: Reply): Promise<void> {
    try {
      for await (const [msg] of sock) {
        const receivedAt = performance.timeOrigin + performance.now();
        this.onMessage?.(msg?.toString("utf8") ?? "", receivedAt);
        await sock.send("ack");
        this.count++;
        if (this.record) {
          const text = msg?.toString("utf8") ?? "";
          const episode = /"task_id":"([^"]+)"/.exec(text)?.[1] ?? "";
          this.acks.push({ episode, receivedAt, ackedAt: performance.timeOrigin + performance.now() });
        }
      }
    } catch {
      // closed
    }
  }

  close(): void {
    for (const s of this.socks) if (!s.closed) s.close();
  }
}
