/**
 * The two targets `npm run bench` (and bench:perf) compares: the exchange's engine and the limit
 * reference, each in a workerd of its own (bench/serve/), with what the load and the profile
 * need of each.
 */
import { serveExchange } from "./serve/exchange";
import { serveReference, type EngineTokens } from "./serve/reference";
import type { TargetName } from "./report";

export type Target = {
  name: TargetName;
  origin: string;
  /** A route served by the Worker alone, and one that reaches the Durable Object but runs no SQL. */
  floorPath: string;
  rpcPath: string;
  pids: number[];
  /** A fresh engine for one run: its base URL and the client and trainer tokens. */
  newEngine(tag: string): Promise<EngineTokens>;
  stop(): Promise<void>;
};

/** `referenceGroupCommit`: the reference shares commits as the engine does (bench/reference/worker.js). */
export async function startTarget(name: TargetName, o: { referenceGroupCommit: boolean; log: (line: string) => void }): Promise<Target> {
  if (name === "engine") {
    const ex = await serveExchange({ log: (l) => o.log(`  exchange: ${l}`) });
    return { name, origin: ex.url, floorPath: "/health", rpcPath: "/get_engine_status", pids: ex.pids, newEngine: (tag) => ex.newEngine(`bench-${tag}`), stop: ex.stop };
  }
  const ref = await serveReference({ port: 0, log: (l) => o.log(`  reference: ${l}`), groupCommit: o.referenceGroupCommit });
  return {
    name,
    origin: ref.url,
    floorPath: "/no-such-route",
    rpcPath: "/get_current_batch_rollout_pool_information",
    pids: ref.pids,
    newEngine: async (tag) => ref.newEngine(`ref-${tag}`),
    stop: ref.stop,
  };
}
