/**
 * The agent's main loop: long-poll the engine for commands and hand them to the dispatcher.
 * The engine keeps the agent's place (unacked commands stay leased, then are handed out
 * again), so when the Worker is unreachable the loop only has to back off and try again.
 */
import { ExchangeError } from "../../src/client";
import { Backoff, type BackoffOptions } from "./backoff";
import type { Dispatcher } from "./dispatcher";
import { isTransient, type EngineLink } from "./engine-link";
import type { Logger } from "./log";
import type { Reachability } from "./reachability";

export type CommandLoopDeps = {
  link: EngineLink;
  dispatcher: Dispatcher;
  reach: Reachability;
  logger: Logger;
  backoff: BackoffOptions;
  stop: AbortSignal;
  waitSeconds: number;
  /** Most commands queued locally before the loop stops asking for more. */
  maxBacklog: number;
  /** Most bytes of delivery payloads queued locally before the loop stops asking for more; one poll may pass it by a payload. */
  maxBacklogBytes: number;
};

/** The Worker hands out at most this many commands per poll. */
const POLL_LIMIT = 100;

/** The agent holds at most this many commands per delivery slot (deliveryConcurrency) before it stops polling. */
export const BACKLOG_PER_DELIVERY_SLOT = 4;

/** Default of deliveryQueueBytes: delivery payloads held before the agent stops polling. */
export const DEFAULT_DELIVERY_QUEUE_BYTES = 256 * 1024 * 1024;

export async function commandLoop(d: CommandLoopDeps): Promise<void> {
  const backoff = new Backoff(d.backoff);
  while (!d.stop.aborted) {
    // Asks for no more than there is room for: a poll answer is taken whole.
    const room = await d.dispatcher.roomFor({ commands: d.maxBacklog, bytes: d.maxBacklogBytes });
    if (d.stop.aborted) break;
    try {
      const polled = await d.link.pollCommands(d.waitSeconds, Math.min(POLL_LIMIT, room), d.stop);
      d.reach.succeeded();
      backoff.reset();
      for (const p of polled) d.dispatcher.submit(p);
    } catch (e) {
      if (d.stop.aborted) break;
      if (isTransient(e)) d.reach.failed("polling for commands", e);
      else {
        // 401/403/404: a wrong token or engine name. Keep trying (it may be fixed on the exchange), loudly.
        const why = e instanceof ExchangeError ? `${e.status} ${e.detail}` : String(e);
        d.logger.error(`the exchange refused the agent's command poll: ${why}; check the engine name and the trainer token`);
      }
      await d.reach.pause(backoff.next(), d.stop, e);
    }
  }
}
