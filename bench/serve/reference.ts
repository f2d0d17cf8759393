/**
 * The limit reference (bench/reference/worker.js), served as the exchange is (./bare-worker.ts),
 * with a SQLite Durable Object and state in memory. Only the Worker differs. It has no admin
 * API and no tokens: any engine name in the path is an engine, and the tokens are fixed.
 */
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import { serveBareWorker } from "./bare-worker";
import type { Served } from "./served";

/** What a load needs of one engine: its base URL and the client's and trainer's tokens. */
export type EngineTokens = { baseUrl: string; clientToken: string; trainerToken: string };

export type ReferenceTarget = Served & { newEngine(prefix: string): EngineTokens };

/** `groupCommit`: the reference shares commits as the engine does (worker.js's GROUP_COMMIT). */
export async function serveReference(opts: { port?: number; log?: (line: string) => void; groupCommit?: boolean } = {}): Promise<ReferenceTarget> {
  const log = opts.log ?? (() => {});
  const ref = await serveBareWorker({
    scriptPath: fileURLToPath(new URL("../reference/worker.js", import.meta.url)),
    label: "reference",
    log,
    ...(opts.port !== undefined ? { port: opts.port } : {}),
    durableObjects: { ENGINE: { className: "ReferenceEngine", useSQLite: true } },
    ...(opts.groupCommit ? { bindings: { GROUP_COMMIT: "1" } } : {}),
  });
  log(`limit reference serving ${ref.url} (in-memory state${opts.groupCommit ? ", group commit" : ""})`);
  return {
    ...ref,
    newEngine: (prefix) => ({ baseUrl: `${ref.url}/e/${prefix}-${randomBytes(3).toString("hex")}`, clientToken: "reference-client", trainerToken: "reference-trainer" }),
  };
}
