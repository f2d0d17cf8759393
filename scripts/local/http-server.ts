/**
 * A real HTTP server on 127.0.0.1 for tests and benchmarks (a stand-in for a model, for the
 * exchange's agent channel), whose close also ends the connections still open (a hung stream,
 * keep-alive).
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";

export type LocalServer = { origin: string; close(): Promise<void> };

export async function serveHttp(handle: (req: IncomingMessage, res: ServerResponse) => Promise<void>, host = "127.0.0.1"): Promise<LocalServer> {
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => void handle(req, res));
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, host, r));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

/** A request's body as text. */
export async function bodyText(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}
