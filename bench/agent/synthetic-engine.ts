/**
 * A stand-in for the engine's agent channel, for the memory benchmark only: it hands out
 * `total` deliver commands (at most `window` unacked at once) and checks that each is acked
 * exactly once. Driving 100,000 deliveries through the real Worker would spend most of the
 * run in claim/end traffic that has nothing to do with the agent's memory.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { serveHttp } from "../serve/http";
import type { Served } from "../serve/served";

export class SyntheticEngine {
  acked = 0;
  doubleAcks = 0;
  failedAcks = 0;
  private nextSeq = 1;
  private readonly unacked = new Set<number>();
  private readonly ackedSeqs = new Set<number>();
  private waiters: Array<() => void> = [];
  private served: Served | null = null;
  url = "";

  constructor(
    private readonly total: number,
    private readonly window: number,
    private readonly addrs: string[],
    private readonly payloadBytes = 600,
  ) {}

  async listen(): Promise<string> {
    this.served = await serveHttp((req, res) => this.handle(req, res));
    this.url = this.served.url;
    return this.url;
  }

  async close(): Promise<void> {
    await this.served?.stop();
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://x");
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const json = (body: unknown): void => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    if (url.pathname.endsWith("/agent/commands")) {
      const limit = Number(url.searchParams.get("limit") ?? 32);
      const deadline = Date.now() + Number(url.searchParams.get("wait") ?? 0) * 1000;
      while (this.available() === 0 && Date.now() < deadline) {
        await new Promise<void>((r) => {
          this.waiters.push(r);
          setTimeout(r, Math.max(0, deadline - Date.now()));
        });
      }
      const n = Math.min(limit, this.available());
      const commands = [];
      for (let i = 0; i < n; i++) {
        const seq = this.nextSeq++;
        this.unacked.add(seq);
        const episode = `ep-${seq}`;
        const payload = JSON.stringify({ reward: 1, is_success: true, metadata: { task_id: episode, pad: "x".repeat(this.payloadBytes) }, log_metrics: {} });
        commands.push({ seq, attempt: 1, created_at: Date.now() / 1000, body: { kind: "deliver", episode_uuid: episode, fence: 1, zmq_listen_result_addr: this.addrs[seq % this.addrs.length], payload } });
      }
      return json({ commands });
    }
    if (url.pathname.endsWith("/agent/ack")) {
      const { seq, ok } = JSON.parse(Buffer.concat(chunks).toString()) as { seq: number; ok: boolean };
      const first = !this.ackedSeqs.has(seq);
      if (first) {
        this.ackedSeqs.add(seq);
        this.unacked.delete(seq);
        this.acked++;
        if (!ok) this.failedAcks++;
        for (const w of this.waiters.splice(0)) w();
      } else this.doubleAcks++;
      return json({ success: true, first_ack: first });
    }
    if (url.pathname.endsWith("/agent/heartbeat")) return json({ success: true, server_time: Date.now() / 1000 });
    res.writeHead(404, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: "not_found", detail: url.pathname }));
  }

  private available(): number {
    return Math.max(0, Math.min(this.window - this.unacked.size, this.total - (this.nextSeq - 1)));
  }
}
