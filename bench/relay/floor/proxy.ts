/**
 * The relay floor's Node half, run as its own process as the agent's gateway is: forwards
 * every request to the upstream origin (argv[2]) on the same path with undici's `request`
 * (as the gateway does) and pipes the answer back. Prints `listening <port>` when ready, and
 * exits when its standard input closes.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { Agent, request } from "undici";

const upstream = (process.argv[2] ?? "").replace(/\/+$/, "");
const dispatcher = new Agent({ keepAliveTimeout: 60_000 });
const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    void (async () => {
      try {
        const up = await request(upstream + (req.url ?? "/"), {
          method: req.method === "GET" ? "GET" : "POST",
          headers: { "content-type": "application/json", authorization: req.headers.authorization ?? "" },
          body: req.method === "GET" ? null : Buffer.concat(chunks),
          dispatcher,
        });
        res.writeHead(up.statusCode, { "content-type": String(up.headers["content-type"] ?? "application/json") });
        for await (const chunk of up.body) res.write(chunk);
        res.end();
      } catch (e) {
        res.writeHead(502).end(String(e));
      }
    })();
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1", () => process.stdout.write(`listening ${(server.address() as AddressInfo).port}\n`));
process.on("SIGTERM", () => process.exit(0));
// The benchmark holds this pipe open; if it dies without stopping the proxy, the pipe closes.
process.stdin.on("close", () => process.exit(0)).resume();
