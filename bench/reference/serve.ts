/**
 * Serves the limit reference (./worker.js) as the exchange is served (../bare-worker.ts), with a
 * SQLite Durable Object and state in memory. Only the Worker differs.
 */
import { fileURLToPath } from "node:url";
import { serveBareWorker, type BareWorker } from "../bare-worker";

export type ReferenceServer = BareWorker;

export async function startReference(opts: { port?: number; log?: (line: string) => void; groupCommit?: boolean } = {}): Promise<ReferenceServer> {
  const log = opts.log ?? (() => {});
  const ref = await serveBareWorker({
    scriptPath: fileURLToPath(new URL("./worker.js", import.meta.url)),
    label: "reference",
    log,
    ...(opts.port !== undefined ? { port: opts.port } : {}),
    durableObjects: { ENGINE: { className: "ReferenceEngine", useSQLite: true } },
    ...(opts.groupCommit ? { bindings: { GROUP_COMMIT: "1" } } : {}),
  });
  log(`limit reference serving ${ref.url} (in-memory state${opts.groupCommit ? ", group commit" : ""})`);
  return ref;
}
