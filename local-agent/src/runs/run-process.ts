/**
 * One process of a run: spawned in its own process group with its output appended to its log
 * file (a file, not a pipe, so it outlives an agent that is killed), watched for its exit, and
 * stopped with SIGTERM to its group, then SIGKILL after the grace period.
 *
 * A process adopted after an agent restart is not the agent's child: its exit is noticed by
 * polling its group, and its exit status cannot be known.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync } from "node:fs";
import { startBanner } from "../trainer-log";
import { MAX_LOG_TAIL_BYTES, utf8TailOf } from "../../../src/protocol/limits";
import type { ProcessReport, ProcessState } from "../../../src/protocol/runs";
import { childEnv } from "../child-env";
import type { Clock } from "../clock";
import { openPrivateAppend } from "../host-files";
import { describeError } from "../log";
import { groupAlive, isOurGroup, processStartedAt, stopGroup, tailFile, type NotedStart } from "./process-group";

const STOP_POLL_MS = 100;

export type Exit = { code: number | null; signal: string | null };

export class RunProcess {
  state: ProcessState = "pending";
  pid: number | null = null;
  exit: Exit | null = null;
  startedAt: number | null = null;
  /** The process's start as /proc tells it (processStartedAt), for the run's note; null without /proc. */
  procStartedAt: number | null = null;
  readyAt: number | null = null;
  endedAt: number | null = null;
  detail = "";
  private child: ChildProcess | null = null;
  /** Adopted, and its pid no longer names it: what runs under that pid is not ours to stop. */
  private isGone = false;

  get gone(): boolean {
    return this.isGone;
  }

  constructor(
    readonly name: string,
    readonly order: number,
    readonly argv: string[],
    readonly logPath: string,
    private readonly clock: Clock,
    /** What of the command and log may be reported (secrets hidden, atropos-url.ts's hideToken). */
    private readonly reported: (text: string) => string = (t) => t,
  ) {}

  /**
   * A process left running by a previous agent, known by its pid and the start noted for it. A pid
   * that names another process now (isOurGroup) makes one that ended: never signalled, since the
   * group is someone else's.
   */
  static adopt(name: string, order: number, pid: number, startedAt: NotedStart, logPath: string, clock: Clock, reported?: (text: string) => string): RunProcess {
    const p = new RunProcess(name, order, [], logPath, clock, reported);
    p.pid = pid;
    p.procStartedAt = startedAt;
    p.state = "ready";
    if (!isOurGroup(pid, startedAt)) {
      p.isGone = true;
      p.exit = { code: null, signal: null };
      p.endedAt = clock.now();
      if (groupAlive(pid)) p.detail = `ended while no agent ran; pid ${pid} now belongs to another process, which was left alone`;
    }
    return p;
  }

  /** Starts the process; returns why it could not start, or null. */
  async spawn(opts: { cwd: string | null; env: Record<string, string> }): Promise<string | null> {
    const fd = openPrivateAppend(this.logPath);
    try {
      startBanner(fd, this.clock.now(), this.reported(this.argv.join(" ")));
      const child = spawn(this.argv[0] as string, this.argv.slice(1), {
        cwd: opts.cwd ?? undefined,
        env: childEnv(opts.env),
        detached: true,
        stdio: ["ignore", fd, fd],
      });
      const failed = await new Promise<Error | null>((resolve) => {
        child.once("spawn", () => resolve(null));
        child.once("error", (e) => resolve(e));
      });
      if (failed !== null) {
        const code = (failed as NodeJS.ErrnoException).code;
        this.state = "failed";
        this.detail = code === "ENOENT" ? `command not found: ${this.argv[0]}` : `cannot start ${this.argv[0]}: ${describeError(failed)}`;
        return this.detail;
      }
      this.child = child;
      this.pid = child.pid as number;
      this.state = "starting";
      this.startedAt = this.clock.now();
      const started = processStartedAt(this.pid);
      this.procStartedAt = typeof started === "number" ? started : null;
      child.once("exit", (code, signal) => {
        this.exit = { code, signal };
        this.endedAt ??= this.clock.now();
      });
      return null;
    } finally {
      closeSync(fd);
    }
  }

  /**
   * Whether the process has ended: our child's exit, or an adopted process gone (its group, or,
   * where /proc tells, the process itself: what it started may live on in its group, and is
   * stopped with the run as an ended child's leftovers are).
   */
  ended(): boolean {
    if (this.pid === null) return this.state === "failed";
    if (this.child !== null) return this.exit !== null;
    if (this.exit !== null) return true;
    if (!groupAlive(this.pid) || processStartedAt(this.pid) === "gone") {
      this.exit = { code: null, signal: null };
      this.endedAt ??= this.clock.now();
      return true;
    }
    return false;
  }

  /** "exited with code 1", "was killed by SIGKILL", or, for an adopted process, that nobody knows. */
  howItEnded(): string {
    const e = this.exit;
    if (e === null) return "is still running";
    if (e.code !== null) return `exited with code ${e.code}`;
    if (e.signal !== null) return `was ended by ${e.signal}`;
    return "ended (exit status unknown: it was adopted after an agent restart)";
  }

  /** SIGTERM to the group, SIGKILL after `graceMs`; resolves once the whole group is gone. */
  async stop(graceMs: number): Promise<void> {
    if (this.pid === null || this.isGone || (!groupAlive(this.pid) && this.ended())) {
      if (this.state === "starting" || this.state === "ready") this.state = "exited";
      return;
    }
    const pid = this.pid;
    // Its leader ended on its own and left helpers in its group (a data loader, an inference
    // child): they are stopped, but how the process ended stays what is reported.
    const endedAlone = this.exit !== null;
    const { killed } = await stopGroup(pid, { graceMs, clock: this.clock, pollMs: STOP_POLL_MS, leaderReaped: () => this.child === null || this.exit !== null });
    if (endedAlone) {
      if (this.state === "starting" || this.state === "ready") this.state = "exited";
      this.detail ||= `${this.howItEnded()}; what it left in its group ${killed ? `ignored SIGTERM for ${graceMs / 1000} s and was killed with SIGKILL` : "was stopped with SIGTERM"}`;
      return;
    }
    this.exit ??= { code: null, signal: killed ? "SIGKILL" : "SIGTERM" };
    this.endedAt ??= this.clock.now();
    this.state = "stopped";
    this.detail = killed ? `ignored SIGTERM for ${graceMs / 1000} s and was killed with SIGKILL` : `stopped with SIGTERM (${this.howItEnded()})`;
  }

  report(withLogTail: boolean): ProcessReport {
    const s = (ms: number | null): number | null => (ms === null ? null : ms / 1000);
    return {
      name: this.name,
      order: this.order,
      state: this.state,
      pid: this.pid,
      command: this.reported(this.argv.join(" ")),
      log_path: this.logPath,
      log_tail: withLogTail ? utf8TailOf(this.reported(tailFile(this.logPath)), MAX_LOG_TAIL_BYTES) : "",
      exit_code: this.exit?.code ?? null,
      signal: this.exit?.signal ?? null,
      started_at: s(this.startedAt),
      ready_at: s(this.readyAt),
      ended_at: s(this.endedAt),
      detail: this.detail,
    };
  }
}
