/**
 * Executes the engine's commands. Trainer commands (start, stop) run one at a time in seq
 * order. Runner commands (deliver, reset) run one at a time per episode, in seq order, so a
 * runner never sees two REQ peers at once and a reset cannot overtake a delivery; different
 * episodes run concurrently up to a limit.
 *
 * Execution is idempotent toward the engine's redelivery: a command still running when it is
 * handed out again is not started twice, and one that finished but whose ack was lost is
 * answered from the journal instead of being executed again.
 */
import { MAX_STORED_BYTES, utf8Bytes, type Command } from "../../src/protocol";
import type { Acker } from "./acker";
import type { PolledCommand } from "./engine-link";
import { InFlight } from "./in-flight";
import { describeError, type Logger } from "./log";
import { commandKey, type Incarnation, type Outcome, type OutcomeJournal } from "./outcome-journal";
import { RESET_CONTEXT_TRACKER, sendToRunner } from "./runner-link";
import { Semaphore } from "./semaphore";
import type { TrainerSupervisor } from "./trainer";
import { isRunCommand, type RunCommands } from "./runs/run-commands";
import { isRolloutCommand, type RolloutCommands } from "./rollout/rollout-commands";

export type DispatcherDeps = {
  trainer: TrainerSupervisor;
  acker: Acker;
  journal: OutcomeJournal;
  logger: Logger;
  delivery: { timeoutMs: number; attempts: number; concurrency: number };
  stop: AbortSignal;
  version: string;
  /** Training runs (src/runs); absent in agents built without them. */
  runs?: RunCommands;
  /** The rollout buffer's commands (src/rollout); absent in agents built without them. */
  rollout?: RolloutCommands;
};

export class Dispatcher {
  /** Commands accepted and not yet finished (queued or executing), by commandKey, with their delivery payload's bytes (0 for other kinds). */
  private readonly active = new Map<string, number>();
  /** The sum of those bytes: the delivery payloads the agent holds. */
  private payloadBytes = 0;
  private readonly episodeTail = new Map<string, Promise<void>>();
  private trainerTail: Promise<void> = Promise.resolve();
  /** Training-run commands in seq order, apart from the trainer's so neither waits on the other; inference tests (minutes) apart again so a stop_run never waits behind one. */
  private runsTail: Promise<void> = Promise.resolve();
  private inferenceTail: Promise<void> = Promise.resolve();
  /** Rollout commands in seq order, apart again: a restart's grace period must not hold up the trainer's commands. */
  private rolloutTail: Promise<void> = Promise.resolve();
  private readonly slots: Semaphore;
  private readonly roomWaiters = new Set<() => void>();
  /** Deliveries and resets whose message is on its way to the runner. */
  private readonly sending = new InFlight();
  /** The agent is stopping: deliveries and resets not begun are not begun (finishDeliveries). */
  private draining = false;

  constructor(private readonly d: DispatcherDeps) {
    this.slots = new Semaphore(d.delivery.concurrency);
  }

  /** Deliveries and resets on their way to their runner now. */
  get deliveriesUnderWay(): number {
    return this.sending.size;
  }

  /**
   * The agent's shutdown, before `stop` aborts: deliveries and resets not begun are not begun
   * (left unacked, for the next agent), and those on their way may finish until `deadline`. Their
   * runner may have the message already, and AgentJet's acks a result once and stops listening:
   * cut short, the next agent's copy would find nobody, and a delivered result would be called
   * undeliverable. True when all finished.
   */
  async finishDeliveries(deadline: Promise<void>): Promise<boolean> {
    this.draining = true;
    return Promise.race([this.sending.settled().then(() => true), deadline.then(() => false)]);
  }

  /** Commands accepted and not yet executed (queued or running). */
  get backlog(): number {
    return this.active.size;
  }

  /** Bytes (UTF-8) of the delivery payloads among them. */
  get backlogBytes(): number {
    return this.payloadBytes;
  }

  submit(polled: PolledCommand): void {
    if (!polled.ok) return this.reject(polled.seq, polled.incarnation, polled.problem);
    const c = polled.command;
    const incarnation = polled.incarnation;
    // Only an outcome of this incarnation: the same seq of an engine of the name deleted since is another command.
    const known = this.d.journal.get(c.seq, incarnation);
    if (known !== undefined) {
      this.d.logger.info(`command ${c.seq} (${c.body.kind}) was handed out again but had already finished; re-sending its ack`);
      void this.d.acker.send(c.seq, incarnation, known);
      return;
    }
    const key = commandKey(c.seq, incarnation);
    if (this.active.has(key)) {
      // Its lease ran out while it queued or ran (a slow runner, a long stop): it is acked when it finishes.
      this.d.logger.info(`command ${c.seq} (${c.body.kind}) was handed out again while still in progress; not starting it twice`);
      return;
    }
    const bytes = c.body.kind === "deliver" ? utf8Bytes(c.body.payload) : 0;
    this.active.set(key, bytes);
    this.payloadBytes += bytes;
    // The outcome is journaled at once and acked in the background: a delivery slot or an
    // episode's turn is not held while the ack waits out a Worker outage (a redelivery in the
    // meantime is answered from the journal).
    const run = (): Promise<void> =>
      this.execute(c, incarnation)
        .then((outcome) => {
          if (outcome !== null) void this.d.acker.finish(c.seq, incarnation, outcome);
        })
        .catch((e: unknown) => this.d.logger.error(`command ${c.seq} (${c.body.kind}) failed unexpectedly: ${describeError(e)}; it will be handed out again`))
        .finally(() => this.done(key));
    const body = c.body;
    if (body.kind === "test_inference") {
      this.inferenceTail = this.inferenceTail.then(run);
      return;
    }
    if (isRolloutCommand(body)) {
      this.rolloutTail = this.rolloutTail.then(run);
      return;
    }
    if (isRunCommand(body)) {
      this.runsTail = this.runsTail.then(run);
      return;
    }
    if (body.kind !== "deliver" && body.kind !== "reset") {
      // Trainer commands, and kinds this agent does not handle, in seq order.
      this.trainerTail = this.trainerTail.then(run);
      return;
    }
    const episode = body.episode_uuid;
    const next = (this.episodeTail.get(episode) ?? Promise.resolve()).then(async () => {
      const release = await this.slots.acquire();
      try {
        await run();
      } finally {
        release();
      }
    });
    this.episodeTail.set(episode, next);
    void next.finally(() => {
      if (this.episodeTail.get(episode) === next) this.episodeTail.delete(episode);
    });
  }

  /**
   * Resolves once the backlog is below `limit.commands` commands and `limit.bytes` bytes of
   * delivery payloads (or the agent stops), so polling does not outrun execution; to how many
   * commands may be polled for then. That many payloads of the largest size a command can have
   * (MAX_STORED_BYTES) still fit in the bytes left, but at least one, so a payload larger than
   * the whole budget is still taken (and nothing more while it is held). So the agent holds at
   * most `limit.commands` commands and `limit.bytes` plus one payload's bytes.
   */
  async roomFor(limit: { commands: number; bytes: number }): Promise<number> {
    while ((this.active.size >= limit.commands || this.payloadBytes >= limit.bytes) && !this.d.stop.aborted) {
      await new Promise<void>((resolve) => {
        const wake = (): void => {
          this.d.stop.removeEventListener("abort", wake);
          this.roomWaiters.delete(wake);
          resolve();
        };
        this.roomWaiters.add(wake);
        this.d.stop.addEventListener("abort", wake, { once: true });
      });
    }
    const byPayloads = Math.max(1, Math.floor((limit.bytes - this.payloadBytes) / MAX_STORED_BYTES));
    return Math.max(1, Math.min(limit.commands - this.active.size, byPayloads));
  }

  private done(key: string): void {
    this.payloadBytes -= this.active.get(key) ?? 0;
    this.active.delete(key);
    for (const wake of [...this.roomWaiters]) wake(); // each re-checks its own limit
  }

  private reject(seq: number | null, incarnation: Incarnation, problem: string): void {
    if (seq === null) {
      this.d.logger.error(`ignoring a command without a usable seq: ${problem}`);
      return;
    }
    const detail = `malformed command, not executed: ${problem} (this agent is version ${this.d.version}; a newer exchange may need a newer agent)`;
    this.d.logger.error(`command ${seq}: ${detail}`);
    void this.d.acker.finish(seq, incarnation, { ok: false, detail });
  }

  /** Runs one command; null means it was interrupted by shutdown and must not be acked. */
  private async execute(c: Command, incarnation: Incarnation): Promise<Outcome | null> {
    const body = c.body;
    const redelivery = c.attempt > 1 ? ` (handed out ${c.attempt} times)` : "";
    switch (body.kind) {
      case "start":
        this.d.logger.info(`command ${c.seq}: start the trainer${redelivery}`);
        return this.d.trainer.start(body.yaml_as_string, c.seq, incarnation);
      case "stop":
        this.d.logger.info(`command ${c.seq}: stop the trainer (${body.reason || "no reason given"})${redelivery}`);
        return this.d.trainer.stop(body.reason || "the engine was stopped");
      case "deliver":
      case "reset": {
        const what = body.kind === "deliver" ? "result" : "context reset";
        const message = body.kind === "deliver" ? body.payload : RESET_CONTEXT_TRACKER;
        // Never sent: left unacked, so the engine hands it to the next agent.
        if (this.draining) return null;
        const sent = await this.sending.track(sendToRunner(body.zmq_listen_result_addr, message, {
          timeoutMs: this.d.delivery.timeoutMs,
          attempts: this.d.delivery.attempts,
          signal: this.d.stop,
          onRetry: (attempt, why) =>
            this.d.logger.warn(`episode ${body.episode_uuid}: ${why} for the ${what}; sending it again (attempt ${attempt} of ${this.d.delivery.attempts}; a late ack to an earlier one still counts)`),
        }));
        if (sent.interrupted) return null;
        if (sent.ok) this.d.logger.info(`episode ${body.episode_uuid}: ${what} delivered (command ${c.seq}${redelivery}); ${sent.detail}`);
        else this.d.logger.warn(`episode ${body.episode_uuid}: ${what} NOT delivered (command ${c.seq}${redelivery}): ${sent.detail}`);
        return { ok: sent.ok, detail: sent.detail };
      }
      case "scan_environments":
      case "start_run":
      case "stop_run":
      case "test_inference":
        if (this.d.runs === undefined) return { ok: false, detail: `this agent (version ${this.d.version}) was started without training runs` };
        this.d.logger.info(`command ${c.seq}: ${body.kind}${"run_id" in body ? ` ${body.run_id}` : ""}${redelivery}`);
        return this.d.runs.execute(body);
      case "start_rollout":
      case "clear_sessions":
        if (this.d.rollout === undefined) return { ok: false, detail: `this agent (version ${this.d.version}) was started without the rollout buffer's commands` };
        this.d.logger.info(`command ${c.seq}: ${body.kind}${redelivery}`);
        return this.d.rollout.execute(body, c.seq, incarnation);
      default: {
        // Written so it compiles whether or not the protocol has kinds this agent does not implement.
        const kind = (body as { kind: string }).kind;
        const detail = `this agent (version ${this.d.version}) does not carry out "${kind}" commands`;
        this.d.logger.warn(`command ${c.seq}: ${detail}`);
        return { ok: false, detail };
      }
    }
  }
}
