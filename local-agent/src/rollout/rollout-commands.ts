/**
 * The rollout buffer's commands on the agent: start_rollout launches the rollout workers,
 * clear_sessions tells the inference upstream to forget dropped sessions.
 */
import type { CommandBody } from "../../../src/protocol/commands";
import type { Logger } from "../log";
import type { Incarnation, Outcome } from "../outcome-journal";
import { withoutCredentials } from "../gateway/errors";
import { clearSessions, type ClearSessionsBody } from "./clear-sessions";
import type { RolloutWorkers, StartRolloutBody } from "./workers";

export type RolloutCommand = StartRolloutBody | ClearSessionsBody;

export function isRolloutCommand(body: CommandBody): body is RolloutCommand {
  return body.kind === "start_rollout" || body.kind === "clear_sessions";
}

/** The seed waits 5 s for the proxy; so do we (a dropped group's sessions are not urgent). */
export const CLEAR_SESSIONS_TIMEOUT_MS = 5000;

export class RolloutCommands {
  constructor(
    private readonly d: {
      workers: RolloutWorkers;
      /** Base URL of the inference upstream (its /admin/clear_sessions); null when none is configured. */
      inferenceAdminUrl: string | null;
      logger: Logger;
      stop: AbortSignal;
      clearTimeoutMs?: number;
    },
  ) {}

  get workers(): RolloutWorkers {
    return this.d.workers;
  }

  /** Null: interrupted by shutdown, not to be acked. */
  async execute(body: RolloutCommand, seq: number, incarnation: Incarnation): Promise<Outcome | null> {
    const out =
      body.kind === "start_rollout"
        ? await this.d.workers.start(body, seq, incarnation)
        : await clearSessions(this.d.inferenceAdminUrl, body, { timeoutMs: this.d.clearTimeoutMs ?? CLEAR_SESSIONS_TIMEOUT_MS, stop: this.d.stop });
    // The ack carries the detail too, but the host's operator reads the agent's log, which also names the upstream.
    const at = body.kind === "clear_sessions" && this.d.inferenceAdminUrl !== null && URL.canParse(this.d.inferenceAdminUrl) ? ` at ${withoutCredentials(this.d.inferenceAdminUrl)}` : "";
    if (out?.ok === true) this.d.logger.info(`${body.kind}${at}: ${out.detail}`);
    else if (out !== null) this.d.logger.warn(`${body.kind}${at}: ${out.detail}`);
    return out;
  }
}
