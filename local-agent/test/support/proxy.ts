/**
 * An HTTP proxy in front of the real Worker that a test can make misbehave: refuse
 * connections, answer 503, or never answer, for all paths or some, or hold a request or an
 * answer back until the test lets it go (to make two messages cross in a chosen order). It also
 * counts the requests that reach the Worker, by path, which is how the facade's coalescing is
 * measured, and the answers passed back.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";

/**
 * pass: forward; refuse: drop the connection; 503: an unhealthy upstream; hang: never answer;
 * no-route: the Worker's 404 for a path it does not know; login-page: an HTML page with a 200
 * (a proxy's login wall, a CDN's challenge) instead of the exchange; bad-token: forwarded with
 * another bearer token, so the Worker answers its own 401 (a token revoked, then issued again);
 * 429: a rate limit's answer, as the Worker words it, with Retry-After: 7.
 */
export type Fault = "pass" | "refuse" | "503" | "hang" | "no-route" | "login-page" | "bad-token" | "429";

export class FaultyProxy {
  /** Decides the fate of each request; `pass` forwards it. */
  fault: (path: string) => Fault = () => "pass";
  /** Rewrites the Worker's answer body before it is passed on (to inject what the Worker would never send). */
  transform: (path: string, body: Buffer) => Buffer = (_p, b) => b;
  /** Awaited before a request is forwarded (with its body) and before the Worker's answer is passed on (with the answer). */
  hold: (path: string, phase: "request" | "answer", body: Buffer) => Promise<void> | void = () => undefined;
  readonly counts = new Map<string, number>();
  /** Answers passed back to the client, by path. */
  readonly answers = new Map<string, number>();
  /** Requests that met a fault: its kind and the path. */
  readonly faulted: Array<{ fault: Fault; path: string }> = [];
  private readonly server = createServer((req, res) => void this.handle(req, res));
  private readonly sockets = new Set<Socket>();
  private readonly hung = new Set<ServerResponse>();
  url = "";

  constructor(private readonly target: string) {
    this.server.on("connection", (s) => {
      this.sockets.add(s);
      s.on("close", () => this.sockets.delete(s));
    });
  }

  async listen(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this.url;
  }

  /** Requests that reached the Worker whose path ends with `suffix`. */
  count(suffix: string): number {
    return sumBySuffix(this.counts, suffix);
  }

  /** Answers passed back whose path ends with `suffix`. */
  answered(suffix: string): number {
    return sumBySuffix(this.answers, suffix);
  }

  /** Faulted requests whose path ends with `suffix`. */
  faults(suffix: string): number {
    return this.faulted.filter((f) => f.path.endsWith(suffix)).length;
  }

  get total(): number {
    let n = 0;
    for (const c of this.counts.values()) n += c;
    return n;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? "/", "http://x").pathname;
    const fault = this.fault(path);
    if (fault !== "pass") {
      this.faulted.push({ fault, path });
      if (fault === "bad-token") return this.forward(req, res, path, "Bearer not-a-token-of-this-exchange");
      if (fault === "refuse") return void req.socket.destroy();
      if (fault === "503") {
        res.writeHead(503, { "content-type": "text/plain" });
        return void res.end("upstream unavailable");
      }
      if (fault === "login-page") {
        res.writeHead(200, { "content-type": "text/html" });
        return void res.end("<html><body>Sign in to continue</body></html>");
      }
      if (fault === "429") {
        res.writeHead(429, { "content-type": "application/json", "retry-after": "7" });
        return void res.end(JSON.stringify({ error: "rate_limited", detail: "Too many requests for this token; retry after 7 s." }));
      }
      if (fault === "no-route") {
        res.writeHead(404, { "content-type": "application/json" });
        return void res.end(JSON.stringify({ error: "not_found", detail: `No route ${req.method} ${path}.` }));
      }
      this.hung.add(res); // never answered; the client's deadline must end it
      return;
    }
    await this.forward(req, res, path);
  }

  private async forward(req: IncomingMessage, res: ServerResponse, path: string, authorization?: string): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string" && k !== "host" && k !== "connection") headers[k] = v;
    if (authorization !== undefined) headers["authorization"] = authorization;
    try {
      await this.hold(path, "request", Buffer.concat(chunks));
      this.counts.set(path, (this.counts.get(path) ?? 0) + 1);
      const upstream = await fetch(this.target + (req.url ?? "/"), { method: req.method, headers, body: chunks.length ? Buffer.concat(chunks) : null });
      const body = this.transform(path, Buffer.from(await upstream.arrayBuffer()));
      await this.hold(path, "answer", body);
      res.writeHead(upstream.status, { "content-type": upstream.headers.get("content-type") ?? "application/json" });
      res.end(body);
      this.answers.set(path, (this.answers.get(path) ?? 0) + 1);
    } catch {
      req.socket.destroy();
    }
  }
}

function sumBySuffix(counts: Map<string, number>, suffix: string): number {
  let n = 0;
  for (const [p, c] of counts) if (p.endsWith(suffix)) n += c;
  return n;
}
