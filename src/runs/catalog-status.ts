/**
 * Why the environment catalog is what it is, from the engine's side of it (its agent, the last
 * scan asked for) and D1's (the last report): an empty list alone cannot tell "no agent" from
 * "no runs config on the host" from "the scan failed", and each needs something else done.
 */
import type { AgentStatus } from "../protocol/agent";
import type { CatalogStatus } from "../protocol/runs";
import type { ScanRecord } from "../engine/command-outcomes";

export type CatalogFacts = {
  agent: AgentStatus;
  scan: ScanRecord | null;
  /** Unix seconds of the agent's last catalog report, and how many environments it holds. */
  scannedAt: number | null;
  count: number;
  /** The engine's clock, unix seconds. */
  now: number;
};

const RESCAN = "ask the agent to scan again (POST /runs/environments/scan, or the rl_scan_environments tool)";

export function catalogStatus(f: CatalogFacts): CatalogStatus {
  const listed = f.count > 0 && f.scannedAt !== null ? ` The ${f.count} environments listed are from its scan at ${iso(f.scannedAt)}.` : "";
  const queued = f.scan?.state === "pending" ? ` A scan is queued (command ${f.scan.seq}) for when it connects.` : "";
  if (!f.agent.connected) {
    const detail =
      f.agent.last_seen === null
        ? "No agent has connected to this engine: start the rollout agent on the GPU host with this engine's name and trainer token."
        : `The engine's agent${f.agent.host ? ` on ${f.agent.host}` : ""} is not connected (last heard from ${Math.max(0, Math.round(f.now - f.agent.last_seen))} s ago); runs cannot start until it is back.`;
    return { state: "no_agent", detail: detail + listed + queued };
  }
  if (f.agent.runs_off_reason !== null) {
    return {
      state: "no_runs_config",
      detail: `The agent on ${f.agent.host ?? "the GPU host"} has training runs off: ${f.agent.runs_off_reason}. Give it a runs config (ROLLOUT_RUNS_CONFIG) and restart it; it scans when it starts.${listed}`,
    };
  }
  if (f.scan?.state === "pending") return { state: "scan_pending", detail: `The agent is scanning its environment directories (command ${f.scan.seq}); list again in a few seconds.${listed}` };
  if (f.scan?.state === "failed") return { state: "scan_failed", detail: `The last scan failed: ${f.scan.detail}. Fix that on the GPU host, then ${RESCAN}.${listed}` };
  if (f.scannedAt === null) {
    return { state: "not_scanned", detail: `The agent has not reported a scan (it scans when it starts; if that failed, its log says why): ${RESCAN}.` };
  }
  return { state: "ready", detail: `${f.count} environment${f.count === 1 ? "" : "s"} from the agent's scan at ${iso(f.scannedAt)}.` };
}

const iso = (unixSeconds: number): string => new Date(unixSeconds * 1000).toISOString();
