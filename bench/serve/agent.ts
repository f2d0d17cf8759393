/**
 * The local agent as the benchmarks run it: its CLI (local-agent/src/cli.ts) in a process of its
 * own, ready once it prints its trainer facade's URL.
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startProcess, type ProcessTarget } from "./process";

const CLI = fileURLToPath(new URL("../../local-agent/src/cli.ts", import.meta.url));

export type AgentTarget = ProcessTarget & {
  /** The trainer facade's origin. */
  facade: string;
  /** The inference gateway's local origin. */
  gateway: string;
  pid: number;
};

/**
 * The agent's ROLLOUT_* settings for the engine `engine` at `server`: free ports for its facade
 * and gateway, its state and logs under `dir`; `over` adds or replaces settings.
 */
export function agentEnv(o: { server: string; engine: string; trainerToken: string; dir: string }, over: Record<string, string> = {}): Record<string, string> {
  return {
    ROLLOUT_SERVER: o.server,
    ROLLOUT_ENGINE: o.engine,
    ROLLOUT_TRAINER_TOKEN: o.trainerToken,
    ROLLOUT_FACADE_PORT: "0",
    ROLLOUT_GATEWAY_PORT: "0",
    ROLLOUT_STATE_DIR: join(o.dir, "state"),
    ROLLOUT_LOG_DIR: join(o.dir, "logs"),
    ...over,
  };
}

/** The agent of `checkout` (this tree's by default: an A/B run serves another's too). */
export async function serveAgent(env: Record<string, string>, checkout?: string): Promise<AgentTarget> {
  // The agent's first line names both: "...; trainer facade on URL; inference gateway on URL[, reached at URL]".
  const p = await startProcess({ script: checkout === undefined ? CLI : join(checkout, "local-agent/src/cli.ts"), env, ready: /trainer facade on (http:\/\/[^\s;,]+); inference gateway on (http:\/\/[^\s;,]+)/, what: "the agent", timeoutMs: 60_000 });
  return { ...p, facade: p.ready[1]!, gateway: p.ready[2]!, pid: p.child.pid! };
}
