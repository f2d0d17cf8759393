/**
 * What the agent tells its engine unprompted: a heartbeat (alive, which host, the trainer's
 * state), and that the trainer exited without being asked to (the engine goes OFFLINE and
 * shows the exit and the last log lines).
 */
import { hostname } from "node:os";
import { ExchangeError } from "../../src/client";
import type { RolloutWorkersStatus, TrainerExitRequest } from "../../src/protocol";
import { Backoff, type BackoffOptions } from "./backoff";
import type { Clock } from "./clock";
import { isTransient, type EngineLink } from "./engine-link";
import { describeError, type Logger } from "./log";
import type { Reachability } from "./reachability";
import type { TrainerSupervisor } from "./trainer";
import type { TrainerExit } from "./trainer";

export type ReportDeps = {
  link: EngineLink;
  trainer: TrainerSupervisor;
  reach: Reachability;
  logger: Logger;
  clock: Clock;
  backoff: BackoffOptions;
  stop: AbortSignal;
  agentId: string;
  version: string;
  /** Where the Worker reaches this agent's inference gateway; null if it runs none. */
  gatewayUrl?: string | null;
  /** The rollout workers' state for the heartbeat (running, or how they ended on their own). */
  rolloutWorkers?: () => RolloutWorkersStatus | null;
  /** Why training runs are off on this host; null when they are on. */
  runsOffReason?: () => string | null;
};

const MAX_LOG_TAIL = 16_384;

export class Reports {
  private wake = new AbortController();
  private warnedUnsupported = false;

  constructor(private readonly d: ReportDeps) {}

  /** Sends a heartbeat now instead of at the next tick (the trainer's state just changed). */
  poke(): void {
    this.wake.abort();
  }

  async heartbeatLoop(intervalMs: number): Promise<void> {
    while (!this.d.stop.aborted) {
      // A fresh wake-up before sending: a poke during the request then makes another one follow at once.
      const wake = new AbortController();
      this.wake = wake;
      const sent = await this.heartbeat();
      // After a failed one, the next goes out as soon as the exchange is back: it may have marked the agent gone.
      await this.d.clock.sleep(intervalMs, AbortSignal.any([this.d.stop, wake.signal, ...(sent ? [] : [this.d.reach.recovered])]));
    }
  }

  async heartbeat(): Promise<boolean> {
    const t = this.d.trainer.status();
    try {
      await this.d.link.client.heartbeat({
        agent_id: this.d.agentId,
        host: hostname(),
        pid: process.pid,
        version: this.d.version,
        gateway_url: this.d.gatewayUrl ?? null,
        trainer: { state: t.state, pid: t.pid, started_at: t.started_at },
        rollout_workers: this.d.rolloutWorkers?.() ?? null,
        runs_off_reason: this.d.runsOffReason?.()?.slice(0, 2000) ?? null,
      });
      this.d.reach.succeeded();
      return true;
    } catch (e) {
      if (this.d.stop.aborted) return false;
      if (e instanceof ExchangeError && e.status === 404 && e.code === "not_found") {
        if (!this.warnedUnsupported) this.d.logger.warn(`the exchange has no heartbeat endpoint (${e.detail}); it will not show this agent as connected`);
        this.warnedUnsupported = true;
      } else if (isTransient(e)) this.d.reach.failed("heartbeat", e);
      else this.d.logger.error(`the exchange refused the heartbeat: ${describeError(e)}`);
      return false;
    }
  }

  /** Reports an unexpected trainer exit, retrying while the exchange is unreachable. */
  async trainerExited(exit: TrainerExit): Promise<void> {
    // The agent's own words go last, so the operator reads the trainer's output and then why it matters.
    const note = `[rollout-agent] ${exit.detail}`;
    const tail = exit.log_tail ? `${exit.log_tail}\n${note}` : note;
    const req: TrainerExitRequest = { exit_code: exit.exit_code, signal: exit.signal, log_tail: tail.slice(-MAX_LOG_TAIL) };
    const backoff = new Backoff(this.d.backoff);
    while (!this.d.stop.aborted) {
      try {
        await this.d.link.client.trainerExit(req);
        this.d.reach.succeeded();
        this.d.logger.info("told the engine that the trainer exited; it is now OFFLINE");
        this.poke();
        return;
      } catch (e) {
        if (this.d.stop.aborted) return;
        if (!isTransient(e)) {
          this.d.logger.error(`the exchange refused the trainer-exit report: ${describeError(e)}`);
          return;
        }
        this.d.reach.failed("reporting the trainer's exit", e);
        await this.d.reach.pause(backoff.next(), this.d.stop);
      }
    }
  }
}
