/**
 * The inference upstream's error answers, in the operator's log. A client hears each one, but
 * the GPU host's log was silent: a wrong trainer key or base URL refused every call with
 * nothing there to say so, while an unreachable upstream was logged. Each upstream and status
 * is said at once the first time, then at most once per EVERY_MS with how many came between.
 */
import type { Logger } from "../log";
import { LogThrottle } from "../log-throttle";

/** The least time between two lines about one upstream's one status. */
export const EVERY_MS = 30_000;

export class UpstreamErrors {
  private readonly throttle: LogThrottle;

  constructor(
    private readonly logger: Logger,
    /** A monotonic clock in ms; tests move it. */
    now?: () => number,
  ) {
    this.throttle = new LogThrottle(EVERY_MS, now);
  }

  /** `upstream` without credentials; `said` the answer as the client got it (its secrets hidden). */
  note(upstream: string, status: number, said: string): void {
    const due = this.throttle.due(`${status} ${upstream}`);
    if (due === null) return;
    const between = due.between === 0 || due.agoMs === null ? "" : ` (and ${due.between} more since ${Math.round(due.agoMs / 1000)} s ago)`;
    const hint = status === 401 || status === 403 ? " (the trainer's key: check the episode's openai_api_key or inferenceUpstream)" : status === 404 ? " (the base URL or the model name: check the episode's openai_base_url or inferenceUpstream)" : "";
    this.logger.warn(`gateway: the inference upstream ${upstream} answered ${status}${hint}${between}: ${said.slice(0, 300)}`);
  }
}
