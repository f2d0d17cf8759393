/**
 * What the agent tells its engine unprompted: a heartbeat (alive, which host, the trainer's
 * state), and that the trainer exited without being asked to (the engine goes OFFLINE and
 * shows the exit and the last log lines).
 */
import { randomUUID } from "node:crypto";
import { readFileSync, rmSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { ExchangeError } from "../../src/client";
import { TrainerExitRequest, type AgentLedgerReport, type RolloutWorkersStatus } from "../../src/protocol";
import { SIGNATURE_MAX_SKEW_SECONDS } from "../../src/protocol/relay";
import { Backoff, type BackoffOptions } from "./backoff";
import type { Clock } from "./clock";
import { refusedForGood } from "./acker";
import { isTransient, type EngineLink } from "./engine-link";
import { writePrivateAtomic } from "./host-files";
import { describeError, type Logger } from "./log";
import type { Reachability } from "./reachability";
import type { TrainerSupervisor } from "./trainer";
import type { TrainerExit } from "./trainer";
import { headOf, MAX_LOG_TAIL_BYTES, utf8TailOf } from "../../src/protocol/limits";

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
  /** The gateway's recorded calls on their way to the ledger, and what became of them. */
  ledger?: () => AgentLedgerReport;
  /** Where a trainer-exit report not yet taken is kept across a restart; none when absent. */
  stateDir?: string;
};

/**
 * A trainer-exit report the engine has not taken yet, on disk: an agent stopped (an upgrade, a
 * reboot) while the exchange failed it would otherwise leave the engine believing a trainer
 * runs, its clients claiming for nobody. `engine` is the engine's URL: a state directory
 * another engine's agent used holds no report of this one's.
 */
const KeptExit = z.object({ id: z.string(), engine: z.string(), request: TrainerExitRequest });
type KeptExit = z.infer<typeof KeptExit>;
const KEPT_EXIT_FILE = "trainer-exit.json";

/** A host clock further than this from the exchange's is worth a warning, well before the gateway refuses. */
const CLOCK_WARN_MS = 30_000;

export class Reports {
  private wake = new AbortController();
  private warnedUnsupported = false;
  private clockState: "right" | "off" | "refused" = "right";

  constructor(private readonly d: ReportDeps) {}

  /** Sends a heartbeat now instead of at the next tick (the trainer's state just changed). */
  poke(): void {
    this.wake.abort();
  }

  async heartbeatLoop(intervalMs: number): Promise<void> {
    /** The heartbeat failed even though the exchange had just answered another request. */
    let failingAlone = false;
    let wokenByRecovery = false;
    while (!this.d.stop.aborted) {
      // A fresh wake-up before sending: a poke during the request then makes another one follow at once.
      const wake = new AbortController();
      this.wake = wake;
      const sent = await this.heartbeat();
      failingAlone = !sent && (failingAlone || wokenByRecovery);
      // After a failed one, the next goes out as soon as the exchange is back: it may have marked
      // the agent gone. Not while the exchange answers other requests but not this one (a 5xx of
      // its own): each of those would send it again at once. It waits its interval then.
      const recovery: AbortSignal | null = sent || failingAlone ? null : this.d.reach.recovered;
      await this.d.clock.sleep(intervalMs, AbortSignal.any([this.d.stop, wake.signal, ...(recovery === null ? [] : [recovery])]));
      wokenByRecovery = recovery?.aborted === true && !wake.signal.aborted;
    }
  }

  async heartbeat(): Promise<boolean> {
    const t = this.d.trainer.status();
    try {
      const sentAt = this.d.clock.now();
      const answer = await this.d.link.client.heartbeat({
        agent_id: this.d.agentId,
        host: hostname(),
        pid: process.pid,
        version: this.d.version,
        gateway_url: this.d.gatewayUrl ?? null,
        trainer: { state: t.state, pid: t.pid, started_at: t.started_at },
        rollout_workers: this.d.rolloutWorkers?.() ?? null,
        runs_off_reason: headOf(this.d.runsOffReason?.() ?? null, 2000),
        ledger: this.d.ledger?.() ?? null,
      });
      this.noteClock(answer.server_time * 1000, sentAt, this.d.clock.now());
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

  /**
   * This host's clock against the exchange's, from a heartbeat's answer (the exchange's time
   * halfway through the request, give or take half its round trip). The gateway refuses an
   * envelope signed more than SIGNATURE_MAX_SKEW_SECONDS off this host's clock, so a clock
   * minutes off fails every relayed call; said once when it goes wrong, and once when it is right again.
   */
  private noteClock(exchangeMs: number, sentAt: number, answeredAt: number): void {
    const off = exchangeMs - (sentAt + answeredAt) / 2;
    const atLeast = Math.abs(off) - (answeredAt - sentAt) / 2;
    const state = atLeast > SIGNATURE_MAX_SKEW_SECONDS * 1000 ? "refused" : atLeast > CLOCK_WARN_MS ? "off" : "right";
    if (state === this.clockState) return;
    const was = this.clockState;
    this.clockState = state;
    const by = `${Math.round(Math.abs(off) / 1000)} s ${off > 0 ? "behind" : "ahead of"} the exchange's`;
    if (state === "refused") {
      this.d.logger.error(`this host's clock is ${by}: the gateway refuses every relayed call (it takes envelopes at most ${SIGNATURE_MAX_SKEW_SECONDS} s off its clock); set the clock right (NTP: timedatectl, chrony)`);
    } else if (state === "off") {
      this.d.logger.warn(`this host's clock is ${by}; past ${SIGNATURE_MAX_SKEW_SECONDS} s the gateway refuses every relayed call: check NTP (timedatectl, chrony)`);
    } else if (was !== "right") {
      this.d.logger.info(`this host's clock agrees with the exchange's again (${by})`);
    }
  }

  /**
   * Reports an unexpected trainer exit until the engine takes it, as an ack is: retried while the
   * exchange is unreachable, and while it refuses the report for a reason that passes (a token
   * being replaced, an engine being made again); dropped only when it can never be taken. Kept
   * on disk until then, for the next agent should this one stop first (resendKeptExit).
   */
  async trainerExited(exit: TrainerExit): Promise<void> {
    // The agent's own words go last, so the operator reads the trainer's output and then why it matters.
    const note = `[rollout-agent] ${exit.detail}`;
    const tail = exit.log_tail ? `${exit.log_tail}\n${note}` : note;
    const req: TrainerExitRequest = {
      exit_code: exit.exit_code,
      signal: exit.signal,
      log_tail: utf8TailOf(tail, MAX_LOG_TAIL_BYTES),
      start_seq: exit.start_seq,
      ...(exit.start_incarnation === undefined ? {} : { start_incarnation: exit.start_incarnation }),
    };
    const kept: KeptExit = { id: randomUUID(), engine: this.d.link.baseUrl, request: req };
    this.keepExit(kept);
    await this.sendExit(kept);
  }

  /** Sends the trainer-exit report a previous agent kept and did not get taken, if any. */
  resendKeptExit(): Promise<void> {
    const path = this.keptExitPath();
    if (path === null) return Promise.resolve();
    let text: string;
    try {
      text = readFileSync(path, "utf8");
    } catch {
      return Promise.resolve(); // none kept
    }
    let kept: KeptExit;
    try {
      kept = KeptExit.parse(JSON.parse(text));
    } catch (e) {
      this.d.logger.warn(`dropped ${path}: it is no trainer-exit report this agent can read (${describeError(e)})`);
      rmSync(path, { force: true });
      return Promise.resolve();
    }
    if (kept.engine !== this.d.link.baseUrl) {
      this.d.logger.warn(`left ${path} alone: it reports a trainer exit to ${kept.engine}, not to this agent's engine`);
      return Promise.resolve();
    }
    this.d.logger.info("re-sending the report of a trainer exit the engine had not taken before the restart");
    return this.sendExit(kept);
  }

  private keptExitPath(): string | null {
    return this.d.stateDir === undefined ? null : join(this.d.stateDir, KEPT_EXIT_FILE);
  }

  private keepExit(kept: KeptExit): void {
    const path = this.keptExitPath();
    if (path === null) return;
    try {
      writePrivateAtomic(path, JSON.stringify(kept));
    } catch (e) {
      this.d.logger.warn(`could not keep the trainer-exit report in ${path} (${describeError(e)}): it is lost if the agent stops before the engine takes it`);
    }
  }

  /** Forgets the kept report once taken or dropped for good, unless a later exit's replaced it. */
  private forgetExit(kept: KeptExit): void {
    const path = this.keptExitPath();
    if (path === null) return;
    try {
      if ((JSON.parse(readFileSync(path, "utf8")) as { id?: unknown }).id !== kept.id) return;
    } catch {
      return;
    }
    rmSync(path, { force: true });
  }

  private async sendExit(kept: KeptExit): Promise<void> {
    const backoff = new Backoff(this.d.backoff);
    let refusedFor: string | null = null;
    while (!this.d.stop.aborted) {
      try {
        await this.d.link.client.trainerExit(kept.request);
        this.d.reach.succeeded();
        this.forgetExit(kept);
        this.d.logger.info("told the engine that the trainer exited; it is now OFFLINE");
        this.poke();
        return;
      } catch (e) {
        if (this.d.stop.aborted) return;
        if (isTransient(e)) this.d.reach.failed("reporting the trainer's exit", e);
        else if (refusedForGood(e)) {
          this.d.logger.error(`the exchange refused the trainer-exit report and can never take it: ${describeError(e)}`);
          this.forgetExit(kept);
          return;
        } else {
          const why = describeError(e);
          // Once per reason: a revoked token refuses every try until the agent has the new one.
          if (refusedFor !== why) this.d.logger.error(`the exchange refused the trainer-exit report (${why}); retrying, check the engine name and the trainer token`);
          refusedFor = why;
        }
        await this.d.reach.pause(backoff.next(), this.d.stop, e);
      }
    }
  }
}
