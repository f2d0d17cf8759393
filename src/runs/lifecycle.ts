/**
 * A run's status machine as plain functions.
 *
 *   pending --agent--> starting --agent--> running --agent--> completed | failed | stopped
 *      \                  \                  \
 *       stop: stopped      stop: stopping ----+--agent--> stopped (or failed/completed, as reported)
 *
 * The engine's record wins over the agent's view: a report about a run that is already over
 * (stopped by force, or stopped while its start command was still queued) changes nothing and
 * tells the agent to stop what it still runs of it.
 */
import { ACTIVE_RUN_STATUSES, type RunReport, type RunStatus } from "../protocol/runs";

export const isActive = (s: RunStatus): boolean => (ACTIVE_RUN_STATUSES as readonly RunStatus[]).includes(s);
export const isTerminal = (s: RunStatus): boolean => !isActive(s);

export type ReportOutcome = {
  next: RunStatus;
  /** The agent must stop the run's processes (the engine considers it over or stopping). */
  mustStop: boolean;
  /** The status changed. */
  changed: boolean;
};

export function applyReport(current: RunStatus, reported: RunReport["status"]): ReportOutcome {
  const agentThinksAlive = reported === "starting" || reported === "running";
  if (isTerminal(current)) return { next: current, mustStop: agentThinksAlive, changed: false };
  if (current === "stopping") {
    const next = agentThinksAlive ? current : reported;
    return { next, mustStop: agentThinksAlive, changed: next !== current };
  }
  // A late "starting" (sent before "running", delivered after it) must not move a run back.
  const next = current === "running" && reported === "starting" ? current : reported;
  return { next, mustStop: false, changed: next !== current };
}

export type StopOutcome = { next: RunStatus; changed: boolean; queueStop: boolean; message: string };

/** What a stop request does to a run in `current`. */
export function applyStop(current: RunStatus, force: boolean): StopOutcome {
  if (isTerminal(current)) return { next: current, changed: false, queueStop: false, message: `The run is already ${current}.` };
  // Nothing runs yet: the agent will find the run stopped when its start command arrives.
  if (current === "pending") return { next: "stopped", changed: true, queueStop: true, message: "The run had not started yet; it is stopped." };
  if (force) {
    return {
      next: "stopped",
      changed: true,
      queueStop: true,
      message: "The run is marked stopped without waiting for the agent; the agent stops its processes when it next hears of the run.",
    };
  }
  if (current === "stopping") return { next: current, changed: false, queueStop: false, message: "The run is already stopping." };
  return { next: "stopping", changed: true, queueStop: true, message: "Stopping: the agent stops the run's processes in reverse order (SIGTERM, then SIGKILL after a grace period)." };
}
