/**
 * A minimal keep-alive JSON client for the hot loop: one undici Pool with a connection per
 * concurrent caller (plus spare), so no request ever waits for a socket.
 */
import { Pool } from "undici";

/**
 * How long the load generators keep an idle socket to an exchange. workerd closes an inbound
 * connection idle for 15 s (measured on the local exchange): a client that keeps it longer may
 * send a request on it just as it closes, and see "other side closed" for a call the exchange
 * never got. Below that, the client lets its idle sockets go first.
 */
export const CLIENT_KEEP_ALIVE_MS = 10_000;

export type Answer = { status: number; body: Record<string, unknown> };

export class Http {
  readonly pool: Pool;
  private readonly basePath: string;
  constructor(baseUrl: string, connections: number) {
    const u = new URL(baseUrl);
    this.pool = new Pool(u.origin, { connections, pipelining: 1, keepAliveTimeout: CLIENT_KEEP_ALIVE_MS });
    this.basePath = u.pathname.replace(/\/+$/, "");
  }
  async call(method: "GET" | "POST", path: string, token: string, body?: unknown): Promise<Answer> {
    const headers: Record<string, string> = { authorization: `Bearer ${token}` };
    if (body !== undefined) headers["content-type"] = "application/json";
    const res = await this.pool.request({
      method,
      path: this.basePath + path,
      headers,
      body: body === undefined ? null : JSON.stringify(body),
    });
    const text = await res.body.text();
    let json: Record<string, unknown>;
    try {
      json = JSON.parse(text) as Record<string, unknown>;
    } catch {
      json = { error: "bad_response", detail: text.slice(0, 200) };
    }
    return { status: res.statusCode, body: json };
  }
  close(): Promise<void> {
    return this.pool.close();
  }
}
