/** A target served by Node's own HTTP server in this process (a stand-in for the exchange, say). */
import type { IncomingMessage, ServerResponse } from "node:http";
import { serveHttp as serveLocalHttp } from "../../scripts/local/http-server";
import type { Served } from "./served";

export async function serveHttp(handle: (req: IncomingMessage, res: ServerResponse) => Promise<void>): Promise<Served> {
  const server = await serveLocalHttp(handle);
  return { url: server.origin, pids: [], stop: () => server.close() };
}
