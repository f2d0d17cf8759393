/**
 * The inference upstream's error answers, in the operator's log. A client hears each one, but
 * the GPU host's log was silent: a wrong trainer key or base URL refused every call with
 * nothing there to say so, while an unreachable upstream was logged. Each upstream and status
 * is said at once the first time, then at most once per EVERY_MS with how many came between.
 */
import type { Logger } from "../log";

/** The least time between two lines about one upstream's one status. */
export const EVERY_MS = 30_000;
/** Upstreams and statuses remembered; past it the one said least recently is forgotten. */
const MAX_KEPT = 1_000;

export class UpstreamErrors {
  private readonly said = new Map<string, { at: number; since: number }>();

  constructor(
    private readonly logger: Logger,
    /** A monotonic clock in ms; tests move it. */
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** `upstream` without credentials; `said` the answer as the client got it (its secrets hidden). */
  note(upstream: string, status: number, said: string): void {
    const key = `${status} ${upstream}`;
    const t = this.now();
    const last = this.said.get(key);
    if (last !== undefined && t - last.at < EVERY_MS) {
      last.since++;
      return;
    }
    const between = last === undefined || last.since === 0 ? "" : ` (and ${last.since} more since ${Math.round((t - last.at) / 1000)} s ago)`;
    const hint = status === 401 || status === 403 ? " (the trainer's key: check the episode's openai_api_key or inferenceUpstream)" : status === 404 ? " (the base URL or the model name: check the episode's openai_base_url or inferenceUpstream)" : "";
    this.logger.warn(`gateway: the inference upstream ${upstream} answered ${status}${hint}${between}: ${said.slice(0, 300)}`);
    this.said.delete(key);
    if (this.said.size >= MAX_KEPT) this.said.delete(this.said.keys().next().value as string);
    this.said.set(key, { at: t, since: 0 });
  }
}
