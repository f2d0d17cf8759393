/**
 * A port on 127.0.0.1 that nothing listens on right now, for a server that must keep its port
 * across restarts (so it cannot ask for port 0 each time) or whose port is chosen before it starts.
 */
import { createServer } from "node:net";

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}
