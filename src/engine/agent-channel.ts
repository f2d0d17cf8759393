/**
 * The engine's channel to its local-agent: commands queued for it (command-queue.ts), handed
 * out by long polls that wake as soon as one is due, acked once each (command + ack +
 * redelivery: every result reaches its runner at least once), the agent's heartbeat record,
 * and what the agent's answers say beyond the queue (command-outcomes.ts).
 */
import type { AckCommandRequest, AckCommandResponse, CommandBody, PollCommandsQuery, PollCommandsResponse } from "../protocol/commands";
import { AGENT_STALE_AFTER_SECONDS, type AgentHeartbeatRequest, type AgentStatus } from "../protocol/agent";
import { ACKED_KEEP_MS, type CommandQueue } from "./command-queue";
import type { CommandOutcomes, ScanRecord } from "./command-outcomes";
import type { EngineStore } from "./engine-store";
import { fail, ok, type Failure, type Reply } from "./reply";

type AgentRecord = AgentHeartbeatRequest & { last_seen: number };

/**
 * The gateway's URL as the overview shows it to roles that do not see the trainer's secrets: the
 * relay never tells clients where the gateway is, and a URL may carry a tunnel's credentials.
 */
export const HIDDEN_GATEWAY = "[hidden]";

export type ChannelHost = {
  now(): number;
  tx<T>(fn: () => T): T;
  armBy(t: number | null): void;
  /** Set once the engine is deleted: polls answer `gone()` instead of waiting. */
  closed(): boolean;
  gone(): Failure;
};

export class AgentChannel {
  private pollWaiters = new Set<() => void>();
  /** The agent session whose polls are served; older sessions' open polls give up (in memory only). */
  private pollSession: string | null = null;
  /**
   * Number of the newest poll of `pollSession`: an agent has one poll open at a time, so an older
   * one still waiting is one whose connection dropped (a NAT reset) and that nobody will read.
   */
  private latestPoll = 0;
  /** The agent's heartbeat record; undefined until read. */
  private agentMemo: AgentRecord | null | undefined = undefined;

  constructor(
    private readonly store: EngineStore,
    readonly commands: CommandQueue,
    readonly outcomes: CommandOutcomes,
    private readonly leaseMs: number,
    private readonly host: ChannelHost,
  ) {}

  enqueue(body: CommandBody): number {
    return this.commands.enqueue(body, this.host.now());
  }

  /** Queues a command on behalf of a Worker-side feature, remembering what its answer will mean. */
  enqueueFor(body: CommandBody): number {
    const seq = this.enqueue(body);
    this.outcomes.queued(seq, body);
    return seq;
  }

  /** Wakes the open polls if a command is due: called once the writes that queued it are made. */
  wake(): void {
    if (this.pollWaiters.size === 0 || !this.commands.hasDue(this.host.now())) return;
    this.wakeAll();
  }

  wakeAll(): void {
    const waiters = [...this.pollWaiters];
    this.pollWaiters.clear();
    for (const w of waiters) w();
  }

  /**
   * `refusal` checks the caller again after the wait: a token revoked while its poll waited (an
   * agent's token rotated) must not lease commands, which the agent holding the new token would
   * then not see until the lease ran out.
   */
  async poll(q: PollCommandsQuery, refusal: () => Failure | null): Promise<Reply<PollCommandsResponse>> {
    const session = q.session ?? null;
    let mine = 0;
    if (session !== null) {
      if (session !== this.pollSession) {
        this.pollSession = session;
        this.host.tx(() => this.commands.releaseOthers(session, this.host.now()));
      }
      mine = ++this.latestPoll;
      // Older polls, of the session this one replaces or of its own, return empty: nobody reads
      // them, and woken in order with this one by a command they would lease it first.
      this.wakeAll();
    }
    const superseded = () => session !== null && (session !== this.pollSession || mine !== this.latestPoll);
    const deadline = Date.now() + q.wait * 1000;
    for (;;) {
      if (this.host.closed()) return this.host.gone();
      if (superseded()) return ok({ incarnation: this.incarnation(), commands: [] });
      if (this.commands.hasDue(this.host.now()) || Date.now() >= deadline) break;
      await new Promise<void>((resolve) => {
        // A poll that times out takes itself out: only wakeAll empties the set, and an idle agent's polls would pile up in it.
        const done = (): void => {
          clearTimeout(timer);
          this.pollWaiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, Math.max(0, deadline - Date.now()));
        this.pollWaiters.add(done);
      });
    }
    if (this.host.closed()) return this.host.gone();
    if (superseded()) return ok({ incarnation: this.incarnation(), commands: [] });
    const refused = refusal();
    if (refused !== null) return refused;
    const now = this.host.now();
    const commands = this.host.tx(() => this.commands.lease(now, this.leaseMs, q.limit, session));
    if (commands.length > 0) this.host.armBy(now + this.leaseMs);
    return ok({ incarnation: this.incarnation(), commands });
  }

  /** Records the agent's answer to a command once; `apply` carries out what the answer means for the engine. */
  ack(req: AckCommandRequest, apply: (body: CommandBody, succeeded: boolean, detail: string) => void): Reply<AckCommandResponse> {
    // Checked before the queue: this engine's command of that seq (or its having swept it) says
    // nothing about the earlier engine of the name whose command the ack answers, and the agent
    // drops an ack refused this way.
    if (req.incarnation !== undefined && req.incarnation !== this.incarnation()) {
      return fail(404, "unknown_command", `No command with seq ${req.seq} on this engine: the ack is for an earlier engine of the same name, deleted since.`);
    }
    const cmd = this.commands.get(req.seq);
    if (cmd === null) {
      // Acked commands are deleted a while after their ack; an agent re-sending a journaled ack later is told it was taken.
      if (this.commands.swept(req.seq)) return ok({ success: true, first_ack: false });
      return fail(404, "unknown_command", `No command with seq ${req.seq} on this engine.`);
    }
    if (cmd.acked) return ok({ success: true, first_ack: false });
    const now = this.host.now();
    this.host.tx(() => {
      this.commands.ack(req.seq, req.ok, req.detail, now);
      apply(cmd.body, req.ok, req.detail);
      this.outcomes.acked(req.seq, cmd.body, req.ok, req.detail, now);
    });
    this.host.armBy(now + ACKED_KEEP_MS);
    this.wake();
    return ok({ success: true, first_ack: true });
  }

  /** Drops what memory holds of the agent: the storage was wiped (EngineObject.destroy), and a deleted engine's agent is no new engine's. */
  forget(): void {
    this.agentMemo = undefined;
    this.pollSession = null;
  }

  heartbeat(req: AgentHeartbeatRequest): { success: true; server_time: number } {
    const now = this.host.now();
    const record = { ...req, last_seen: now / 1000 };
    this.store.setKv("agent", record);
    this.agentMemo = record;
    return { success: true as const, server_time: now / 1000 };
  }

  status(): AgentStatus {
    const a = this.record();
    if (a === null) {
      return { connected: false, agent_id: null, host: null, pid: null, version: null, trainer_state: null, trainer_pid: null, gateway_url: null, rollout_workers: null, runs_off_reason: null, ledger: null, last_seen: null };
    }
    return {
      connected: this.host.now() / 1000 - a.last_seen < AGENT_STALE_AFTER_SECONDS,
      agent_id: a.agent_id,
      host: a.host,
      pid: a.pid,
      version: a.version,
      trainer_state: a.trainer.state,
      trainer_pid: a.trainer.pid,
      gateway_url: a.gateway_url ?? null,
      // Records written before agents reported rollout workers have no such field.
      rollout_workers: a.rollout_workers ?? null,
      runs_off_reason: a.runs_off_reason ?? null,
      ledger: a.ledger ?? null,
      last_seen: a.last_seen,
    };
  }

  /** The agent's gateway, from its last heartbeat: every relayed call reads it. */
  gatewayUrl(): string | null {
    return this.record()?.gateway_url ?? null;
  }

  /** What the training-run catalog says about itself: is an agent there, can it run them, and the last scan. */
  catalogState(): { agent: AgentStatus; scan: ScanRecord | null; now: number } {
    return { agent: this.status(), scan: this.outcomes.lastScan(), now: this.host.now() / 1000 };
  }

  private incarnation(): string {
    return this.store.meta.incarnation;
  }

  /** The agent's last heartbeat, read once and then kept in step with each heartbeat. */
  private record(): AgentRecord | null {
    if (this.agentMemo === undefined) this.agentMemo = this.store.getKv<AgentRecord>("agent");
    return this.agentMemo;
  }
}
