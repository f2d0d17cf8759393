/**
 * Supervises the one trainer process of this engine: start it in its own process group with
 * its output in a log file, stop the whole group (SIGTERM, then SIGKILL after a grace period),
 * and notice when it dies on its own.
 *
 * The trainer's pid is kept in <stateDir>/trainer.json while it runs. A trainer outlives an
 * agent that is SIGKILLed (it is in its own group and writes to a file, not to a pipe), and
 * the restarted agent adopts it from that file instead of losing track of a GPU job, once it
 * has made sure the pid is still that trainer's (process-group.ts's isOurGroup).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import type { TrainerState } from "../../src/protocol";
import type { Clock } from "./clock";
import { TemplateError, expandCommand } from "./command-template";
import { childEnv } from "./child-env";
import { notePid, privateDir, writePrivateAtomic } from "./host-files";
import { InFlight } from "./in-flight";
import { describeError, type Logger } from "./log";
import type { Incarnation, Outcome } from "./outcome-journal";
import { groupAlive, isOurGroup, notedStart, processStartedAt, signalGroup, stopGroup } from "./runs/process-group";
import { startBanner, type TrainerLog } from "./trainer-log";


/**
 * `start_seq`: the start command that launched the trainer, null when unknown (a pid file of an
 * older agent); `start_incarnation`: its engine's, undefined when unknown.
 */
export type TrainerExit = { exit_code: number | null; signal: string | null; log_tail: string; detail: string; start_seq: number | null; start_incarnation?: string };

export type TrainerOptions = {
  /** The command template's words; null when the agent has none configured. */
  command: string[] | null;
  cwd: string | null;
  stateDir: string;
  log: TrainerLog;
  graceMs: number;
  /** Placeholder values besides {config}, e.g. facade_url. */
  placeholders: Record<string, string>;
  /** Extra environment for the trainer. */
  env: Record<string, string>;
  logger: Logger;
  clock: Clock;
  /** The trainer exited without being asked to stop. */
  onUnexpectedExit: (exit: TrainerExit) => void;
  /** The trainer's state changed (the heartbeat tells the engine at once rather than at its next tick). */
  onChange?: () => void;
};

/** A stop's outcome, with how the trainer ended when one was running. */
export type StopOutcome = Outcome & { exit_code: number | null; signal: string | null };

type Running = {
  pid: number;
  startedAt: number;
  /** The start command's seq and its engine's incarnation, so a redelivered start is recognised. */
  seq: number;
  /** Undefined for a trainer adopted from a pid file written without it: it matches no command. */
  incarnation: Incarnation | undefined;
  child: ChildProcess | null;
  /** Resolves when the group leader has exited. */
  exited: Promise<{ code: number | null; signal: string | null }>;
  stopping: Promise<StopOutcome> | null;
};

/**
 * `started_at` is the agent's clock at the spawn; `proc_started_at` the process's start as /proc
 * tells it (absent without /proc, and in notes of agents that did not keep it).
 */
type PidFile = { pid: number; started_at: number; seq: number; incarnation?: Incarnation; proc_started_at?: number };

const POLL_MS = 100;
const PROGRESS_EVERY_MS = 5000;
/** How long a start waits for SIGKILLed leftovers to be gone (a process in uninterruptible sleep dies late). */
const LEFTOVER_KILL_WAIT_MS = 5000;

export class TrainerSupervisor {
  private current: Running | null = null;
  private lastState: TrainerState = "idle";
  private readonly pidFile: string;
  private readonly configFile: string;
  private closed = new AbortController();
  /** The agent's deliberate shutdown has begun (shutdown()): a trainer started now would outlive the agent. */
  private readonly shuttingDown = new AbortController();
  /** Starts under way (waiting for leftovers, or spawning), which a shutdown waits out before it stops the trainer. */
  private readonly starting = new InFlight();
  /** Processes a trainer that exited on its own left in its group, until they are gone (SIGKILL after the grace period). */
  private leftovers: Promise<void> | null = null;

  constructor(private readonly opts: TrainerOptions) {
    this.pidFile = join(opts.stateDir, "trainer.json");
    this.configFile = join(opts.stateDir, "train-config.yaml");
  }

  status(): { state: TrainerState; pid: number | null; started_at: number | null } {
    const c = this.current;
    if (c === null) return { state: this.lastState, pid: null, started_at: null };
    return { state: c.stopping ? "stopping" : "running", pid: c.pid, started_at: c.startedAt / 1000 };
  }

  /** Picks up a trainer left running by a previous agent process, or reports that it died meanwhile. */
  adopt(): void {
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(this.pidFile, "utf8"));
    } catch {
      return;
    }
    // Valid JSON that is no object (null, a number) names no trainer either.
    const saved = (typeof parsed === "object" && parsed !== null ? parsed : {}) as PidFile;
    if (typeof saved.pid !== "number" || saved.pid <= 1) {
      rmSync(this.pidFile, { force: true });
      return;
    }
    if (!isOurGroup(saved.pid, notedStart(saved.proc_started_at, saved.started_at))) {
      rmSync(this.pidFile, { force: true });
      this.lastState = "exited";
      const reused = groupAlive(saved.pid) ? `; pid ${saved.pid} now belongs to another process, which is left alone` : "";
      const detail = `the trainer (pid ${saved.pid}) exited while the agent was not running; its exit status is unknown${reused}`;
      this.opts.logger.warn(detail);
      this.opts.onUnexpectedExit({ exit_code: null, signal: null, log_tail: this.opts.log.tail(), detail, start_seq: typeof saved.seq === "number" ? saved.seq : null, ...startIncarnation(saved.incarnation) });
      return;
    }
    this.opts.logger.info(`adopting trainer pid ${saved.pid} (started ${new Date(saved.started_at).toISOString()}), left running by a previous agent`);
    const exited = this.watchLeader(saved.pid).then(() => ({ code: null, signal: null }));
    const running: Running = { pid: saved.pid, startedAt: saved.started_at, seq: saved.seq, incarnation: saved.incarnation, child: null, exited, stopping: null };
    this.current = running;
    void exited.then((e) => this.onExit(running, e.code, e.signal));
  }

  /**
   * Null when the agent's shutdown came first, before the spawn: nothing was started, and the
   * command is left unacked, so the engine hands it to the next agent, as any command a shutdown
   * interrupts. A spawn already under way when the shutdown begins is stopped by shutdown().
   */
  start(yaml: string, seq: number, incarnation: Incarnation = null): Promise<Outcome | null> {
    return this.starting.track(this.startNow(yaml, seq, incarnation));
  }

  private async startNow(yaml: string, seq: number, incarnation: Incarnation): Promise<Outcome | null> {
    // Not beside what the last trainer left holding the GPUs: at most the grace period, unless the agent goes first.
    if (this.current === null && this.leftovers !== null) await Promise.race([this.leftovers, aborted(this.shuttingDown.signal)]);
    // From here to the spawn nothing awaits: a shutdown begun later finds this start in `starting` and waits for its trainer.
    if (this.shuttingDown.signal.aborted) {
      this.opts.logger.info(`not starting the trainer (command ${seq}): the agent is shutting down; the command is left for the next agent`);
      return null;
    }
    const c = this.current;
    if (c !== null) {
      // The same command by its seq and its engine's incarnation: an engine made again under the name counts its commands from 1 again.
      if (c.seq === seq && c.incarnation === incarnation && c.stopping === null) return { ok: true, detail: `trainer already running (pid ${c.pid}), started by this same command` };
      return {
        ok: false,
        detail: `a trainer is already running on this agent (pid ${c.pid}, started ${new Date(c.startedAt).toISOString()}); stop it before starting another`,
      };
    }
    if (this.opts.command === null) {
      return { ok: false, detail: "this agent has no trainer command configured (set trainerCommand, e.g. 'ajet --conf {config}')" };
    }
    if (this.opts.cwd !== null && !isDirectory(this.opts.cwd)) {
      return { ok: false, detail: `the trainer's working directory ${this.opts.cwd} does not exist` };
    }
    let argv: string[];
    try {
      argv = expandCommand(this.opts.command, { ...this.opts.placeholders, config: this.configFile });
    } catch (e) {
      if (e instanceof TemplateError) return { ok: false, detail: `trainerCommand: ${e.message}` };
      throw e;
    }
    privateDir(this.opts.stateDir, this.opts.logger);
    privateDir(this.opts.log.dir, this.opts.logger);
    try {
      writePrivateAtomic(this.configFile, yaml);
    } catch (e) {
      // Answered, not thrown: a throw leaves the start unacked, handed out again after each lease for ever.
      const detail = `cannot write ${this.configFile}: ${describeError(e)}`;
      this.opts.logger.error(`not starting the trainer (command ${seq}): ${detail}`);
      return { ok: false, detail };
    }

    this.lastState = "starting";
    const fd = this.opts.log.openForChild();
    let child: ChildProcess;
    try {
      startBanner(fd, this.opts.clock.now(), argv.map(quoteForLog).join(" "));
      child = spawn(argv[0] as string, argv.slice(1), {
        cwd: this.opts.cwd ?? undefined,
        env: childEnv({ ...this.opts.env, ROLLOUT_TRAIN_CONFIG: this.configFile }),
        // Its own process group: stop signals the whole tree, and a Ctrl-C aimed at the agent does not reach it.
        detached: true,
        stdio: ["ignore", fd, fd],
      });
      const spawned = await new Promise<Error | null>((resolve) => {
        child.once("spawn", () => resolve(null));
        child.once("error", (err) => resolve(err));
      });
      if (spawned !== null) {
        this.lastState = "idle";
        const code = (spawned as NodeJS.ErrnoException).code;
        const why =
          code === "ENOENT"
            ? `trainer command not found: ${JSON.stringify(argv[0])} (check trainerCommand and PATH)`
            : code === "EACCES"
              ? `trainer command ${JSON.stringify(argv[0])} is not executable`
              : `cannot start the trainer ${JSON.stringify(argv[0])}: ${describeError(spawned)}`;
        this.opts.logger.error(why);
        return { ok: false, detail: why };
      }
    } finally {
      closeSync(fd);
    }
    const pid = child.pid as number;
    const startedAt = this.opts.clock.now();
    const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
    const running: Running = { pid, startedAt, seq, incarnation, child, exited, stopping: null };
    this.current = running;
    // Watched before anything can throw: a trainer nobody watches dies unnoticed, and every later start is refused as "already running".
    void exited.then((e) => this.onExit(running, e.code, e.signal));
    const procStartedAt = processStartedAt(pid);
    notePid(this.pidFile, JSON.stringify({ pid, started_at: startedAt, seq, incarnation, ...(typeof procStartedAt === "number" ? { proc_started_at: procStartedAt } : {}) } satisfies PidFile), `trainer pid ${pid} runs`, this.opts.logger);
    const detail = `trainer started (pid ${pid}): ${argv.map(quoteForLog).join(" ")}; output in ${this.opts.log.path}`;
    this.opts.logger.info(detail);
    this.opts.onChange?.();
    return { ok: true, detail };
  }

  /**
   * SIGTERM to the whole group, SIGKILL after the grace period. Idempotent: no trainer is success,
   * once what a trainer that exited on its own left in its group is gone too (endLeftovers).
   */
  stop(reason: string): Promise<StopOutcome> {
    const c = this.current;
    if (c === null) {
      const none: StopOutcome = { ok: true, detail: "no trainer was running", exit_code: null, signal: null };
      const left = this.leftovers;
      return left === null ? Promise.resolve(none) : left.then(() => ({ ...none, detail: "no trainer was running; the processes the last one left in its group were stopped" }));
    }
    c.stopping ??= this.terminate(c, reason);
    return c.stopping;
  }

  /**
   * The agent's deliberate shutdown (SIGINT/SIGTERM): from now on no trainer starts, a start
   * whose spawn is under way is let finish, and the trainer, if one runs, is stopped like a stop
   * command would. Null when none was running; else with the seq of the start that launched it.
   */
  async shutdown(reason: string): Promise<(StopOutcome & Pick<TrainerExit, "start_seq" | "start_incarnation">) | null> {
    this.shuttingDown.abort();
    await this.starting.settled();
    const c = this.current;
    if (c === null) return null;
    return { ...(await this.stop(reason)), start_seq: c.seq, ...startIncarnation(c.incarnation) };
  }

  /** The agent is exiting: stop watching an adopted trainer (it keeps running and is adopted again). */
  close(): void {
    this.closed.abort();
  }

  private async terminate(c: Running, reason: string): Promise<StopOutcome> {
    const graceS = this.opts.graceMs / 1000;
    this.opts.logger.info(`stopping trainer pid ${c.pid} (${reason}): SIGTERM to its process group, SIGKILL after ${graceS} s`);
    let nextProgress = PROGRESS_EVERY_MS;
    const { killed } = await stopGroup(c.pid, {
      graceMs: this.opts.graceMs,
      clock: this.opts.clock,
      pollMs: POLL_MS,
      ...(c.child !== null ? { leaderReaped: () => settled(c.exited) } : {}),
      onWait: (waited) => {
        if (waited < nextProgress) return;
        this.opts.logger.info(`waiting for trainer pid ${c.pid} to exit: ${Math.round(waited / 1000)} s of ${graceS} s grace`);
        nextProgress += PROGRESS_EVERY_MS;
      },
      onKill: () => this.opts.logger.warn(`trainer pid ${c.pid} still running ${graceS} s after SIGTERM: sending SIGKILL to its process group`),
    });
    const e = c.child !== null ? await c.exited : { code: null, signal: null };
    const how = e.code !== null ? `exited with code ${e.code}` : e.signal !== null ? `ended by ${e.signal}` : "exited";
    const detail = killed ? `trainer pid ${c.pid} ignored SIGTERM for ${graceS} s and was killed with SIGKILL` : `trainer pid ${c.pid} stopped: ${how} after SIGTERM`;
    this.opts.logger.info(detail);
    if (this.current === c) {
      this.current = null;
      this.lastState = "idle";
      rmSync(this.pidFile, { force: true });
      this.opts.onChange?.();
    }
    return { ok: true, detail, exit_code: e.code, signal: e.signal };
  }

  private onExit(c: Running, code: number | null, signal: string | null): void {
    // After close() the agent is going away and the trainer is left to the next agent to adopt.
    if (this.current !== c || this.closed.signal.aborted) return;
    rmSync(this.pidFile, { force: true });
    if (c.stopping !== null) return; // terminate() reports it and clears the state once the group is gone
    this.current = null;
    this.lastState = "exited";
    // The leader died; helpers left in its group (data loaders, ray workers) would hold the GPUs.
    const leftovers = signalGroup(c.pid, "SIGTERM");
    if (leftovers) this.leftovers ??= this.endLeftovers(c.pid).finally(() => (this.leftovers = null));
    const how = code !== null ? `exited with code ${code}` : signal !== null ? `was ended by ${signal}` : "exited (status unknown: adopted from a previous agent)";
    const detail = `trainer pid ${c.pid} ${how} without a stop command${leftovers ? "; sent SIGTERM to the processes it left in its group" : ""}`;
    this.opts.logger.warn(detail);
    this.opts.onChange?.();
    this.opts.onUnexpectedExit({ exit_code: code, signal, log_tail: this.opts.log.tail(), detail, start_seq: c.seq, ...startIncarnation(c.incarnation) });
  }

  /** What a trainer that exited on its own left in its group, sent SIGTERM: SIGKILL after the grace period, as a stop does. */
  private async endLeftovers(pgid: number): Promise<void> {
    const start = this.opts.clock.now();
    while (groupAlive(pgid) && this.opts.clock.now() - start < this.opts.graceMs && !this.closed.signal.aborted) await this.opts.clock.sleep(POLL_MS, this.closed.signal);
    if (!groupAlive(pgid)) return;
    // Also when the agent is going away: no later agent adopts the helpers of a trainer that is gone.
    this.opts.logger.warn(`the processes trainer pid ${pgid} left in its group still run ${this.opts.graceMs / 1000} s after SIGTERM: sending SIGKILL`);
    signalGroup(pgid, "SIGKILL");
    const killedAt = this.opts.clock.now();
    while (groupAlive(pgid) && this.opts.clock.now() - killedAt < LEFTOVER_KILL_WAIT_MS) await this.opts.clock.sleep(POLL_MS);
  }

  /**
   * For an adopted trainer (not our child): polls until it has exited, as a child's exit event
   * would say: its leader gone, whatever it left in its group (onExit stops those), or the whole
   * group gone.
   */
  private async watchLeader(pid: number): Promise<void> {
    while (groupAlive(pid) && processStartedAt(pid) !== "gone" && !this.closed.signal.aborted) await this.opts.clock.sleep(500, this.closed.signal);
    if (this.closed.signal.aborted) await new Promise<never>(() => {}); // the agent stopped: nothing more to report
  }
}

/** The report names the engine's incarnation only when the start command named one. */
function startIncarnation(incarnation: Incarnation | undefined): Pick<TrainerExit, "start_incarnation"> {
  return typeof incarnation === "string" ? { start_incarnation: incarnation } : {};
}

function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener("abort", () => resolve(), { once: true });
  });
}

async function settled(p: Promise<unknown>): Promise<boolean> {
  const marker = Symbol();
  return (await Promise.race([p, Promise.resolve(marker)])) !== marker;
}

export function isDirectory(p: string): boolean {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
}

function quoteForLog(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

