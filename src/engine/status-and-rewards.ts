/**
 * The engine's status machine (OFFLINE, BOOTING, ROLLING, ...: seeds/swarm_server.py.txt) and
 * the reward history it writes as the trainer's global step moves on. A rolling phase that ends
 * clears its episodes; its rewards outlive them, folded into the meta's accumulator, so that a
 * status change never loses the step's history (the seed clears it before it is written).
 * The history is divided into runs (history-runs.ts): a trainer's start begins one, and a run's
 * steps never mix with another's. Methods that write run inside the transaction their caller opens.
 */
import type { BoolResponse, EngineStatusResponse, UpdateEngineStatusRequest } from "../protocol/swarm";
import type { CommandBody } from "../protocol/commands";
import type { TrainerExitRequest } from "../protocol/agent";
import type { RewardHistoryQuery, RunBeginning } from "../protocol/history";
import { storedStringTooLarge } from "../protocol/limits";
import type { SyncConfig, UpdateSyncConfigRequest } from "../protocol/sync";
import type { EngineStore, Meta } from "./engine-store";
import type { Episodes } from "./episodes";
import type { HistoryRuns } from "./history-runs";
import type { OutboxItem } from "./outbox";
import { fail, ok, type Reply } from "./reply";
import { EMPTY_ACCUMULATOR, accumulate, claimsLive, runBeginning, summarize, type RewardAccumulator } from "./rules";

export type StatusHost = {
  now(): number;
  addOutbox(item: OutboxItem): void;
  enqueue(body: CommandBody): number;
};

export class StatusAndRewards {
  constructor(
    private readonly store: EngineStore,
    private readonly episodes: Episodes,
    private readonly runs: HistoryRuns,
    private readonly host: StatusHost,
  ) {}

  view(): EngineStatusResponse {
    const m = this.store.meta;
    return { engine_status: m.status, engine_status_detail: m.detail, global_step: m.globalStep };
  }

  /**
   * The view and since when the engine has held its status, for the overview. get_engine_status
   * keeps AgentJet's shape (view).
   */
  overview(): EngineStatusResponse & { engine_status_since: number | null } {
    return { ...this.view(), engine_status_since: this.store.meta.statusSince };
  }

  syncConfig(yaml: string): Reply<{ success: true }> {
    if (this.store.meta.status !== "ENGINE.OFFLINE") {
      return fail(400, "engine_started", "Engine is already started. Call `stop_engine` first before syncing new training configuration.");
    }
    // Kept as a JSON string in kv, and so in the start command it goes out in.
    const tooLarge = storedStringTooLarge("yaml_as_string", yaml);
    if (tooLarge !== null) return fail(413, "payload_too_large", tooLarge);
    this.store.setKv("train_config_yaml", yaml);
    return ok({ success: true as const });
  }

  /** Boots the trainer with the synced config: the agent gets a start command. */
  start(): Reply<{ success: true }> {
    const yaml = this.store.getKv<string>("train_config_yaml");
    if (yaml === null) return fail(400, "no_config", "No training config found. Call /sync_train_config first.");
    // A start sent again while the trainer boots (its answer lost) is answered as the first: the
    // config cannot have changed since (syncConfig), and a second start command would only be refused by the agent.
    if (this.store.meta.status === "ENGINE.BOOTING") return ok({ success: true as const });
    if (this.store.meta.status !== "ENGINE.OFFLINE") {
      return fail(409, "engine_started", `Engine is already started and its trainer past booting (status ${this.store.meta.status}); to restart it, call /stop_engine and then /start_engine.`);
    }
    this.clearEpisodes();
    this.beginRun("start_engine");
    const startSeq = this.host.enqueue({ kind: "start", yaml_as_string: yaml });
    this.store.saveMeta({ ...this.store.meta, status: "ENGINE.BOOTING", bootingStartTime: this.host.now() / 1000, detail: null, startSeq });
    return ok({ success: true as const });
  }

  stop(): void {
    this.clearEpisodes();
    this.store.saveMeta({ ...this.store.meta, status: "ENGINE.OFFLINE", bootingStartTime: null });
    this.host.enqueue({ kind: "stop", reason: "stop_engine requested" });
  }

  update(req: UpdateEngineStatusRequest): BoolResponse {
    const prev = this.store.meta;
    const began = runBeginning(prev, req);
    const version = req.weight_version ?? null;
    // Weight versions only go forward within a run: a lower one is a late or repeated report (a
    // retry after a timeout), and taking it would stamp calls, claims and ends with weights no
    // longer served and give the buffer's pulls a negative lag. Refused whole, as nothing of it
    // can be trusted. A run that begins (a restarted trainer) may start lower again.
    // So do the targets of the syncs within a run: a sync report naming a lower target than the
    // sync under way is the last sync's, retried (taken, it would end this sync at the old
    // version). A status that ends the sync may name a lower one: the sync was abandoned.
    const target = req.engine_status === "ENGINE.WEIGHT_SYNCING" && prev.status === "ENGINE.WEIGHT_SYNCING" ? prev.syncingToVersion : null;
    const below =
      version === null || began !== null
        ? null
        : prev.versionFloor !== null && version < prev.versionFloor
          ? `the engine's ${prev.versionFloor}, taken earlier in this run`
          : target !== null && version < target
            ? `${target}, the version the weight sync under way goes to`
            : null;
    if (below !== null) {
      return {
        success: false,
        failure_reason:
          `weight_version ${version} is lower than ${below}: a late or repeated report? Nothing of this one was applied. ` +
          "A trainer restarted on older weights begins a new run (ENGINE.BOOTING, a global_step that goes back, or POST /history/begin_run) and may report a lower version then.",
      };
    }
    // Leaving the statuses claims live in clears the pool (AgentJet's semantics); with
    // keep_claims_across_sync, a weight sync is one of them, and its time is given back to the
    // leases. Going OFFLINE forgets all, from whatever status: the ends a sync remembered too.
    if (req.engine_status === "ENGINE.OFFLINE" && prev.status !== "ENGINE.OFFLINE") this.clearEpisodes("all");
    else if (claimsLive(prev.status, prev.sync) && !claimsLive(req.engine_status, prev.sync)) this.clearEpisodes("phase");
    const wasSyncing = prev.status === "ENGINE.WEIGHT_SYNCING" && prev.syncingSince !== null;
    const syncing = req.engine_status === "ENGINE.WEIGHT_SYNCING" && claimsLive(req.engine_status, prev.sync);
    const syncingSince = syncing ? (wasSyncing ? prev.syncingSince : this.host.now()) : null;
    const resumed = wasSyncing && !syncing && claimsLive(req.engine_status, prev.sync);
    // A sync that keeps the claims still ends the batch, as AgentJet's clear does: the ended and
    // failed claims go (else the pool would list every step's), the live ones stay. The ends are
    // remembered apart a while, since claims live on: a repeated end is still known as one.
    if (syncing && !wasSyncing) this.clearEpisodes("finished");
    // A new run has already written the step the old one was at.
    const freshRun = began !== null && this.beginRun(began).newRun;
    // From the store, not prev: clearing may have moved the fence floor, and a run begun.
    const next: Meta = { ...this.store.meta, status: req.engine_status, syncingSince };
    if (req.engine_status === "ENGINE.BOOTING" && prev.status !== "ENGINE.BOOTING") next.bootingStartTime = this.host.now() / 1000;
    if (prev.status === "ENGINE.BOOTING" && req.engine_status !== "ENGINE.BOOTING") next.bootingStartTime = null;
    if (req.global_step !== undefined && req.global_step !== null) {
      if (!freshRun && prev.globalStep !== null && prev.globalStep !== req.global_step) {
        this.finalizeStep(prev.globalStep);
        next.acc = EMPTY_ACCUMULATOR;
        next.accEpoch = this.store.meta.accEpoch + 1;
      }
      next.globalStep = req.global_step;
    }
    if (req.engine_status_detail !== undefined && req.engine_status_detail !== null) next.detail = req.engine_status_detail;
    Object.assign(next, this.versions(prev, req.engine_status, version, next.versionFloor, began !== null));
    this.store.saveMeta(next);
    if (resumed) this.episodes.extendLeases(prev.syncingSince ?? this.host.now(), this.host.now());
    return { success: true, failure_reason: "" };
  }

  /**
   * The weight versions after an accepted report (`floor`: the run's, after any beginning). The
   * weights in use during a sync are the old ones: a version reported with ENGINE.WEIGHT_SYNCING
   * is the one being synced to, and becomes the engine's version when the sync ends, unless the
   * status that ends it names one (the documented way: the new version with the status that ends
   * the sync). A report that begins a run (`runBegan`: a trainer booted again mid-sync) does not
   * take the target of the sync it cut short: the new trainer's weights are its own, and the
   * target would be a floor it never reached; nor does ENGINE.OFFLINE, which abandons the sync (as
   * stop_engine does). The run's floor is the version last taken in it.
   */
  private versions(
    prev: Meta,
    status: UpdateEngineStatusRequest["engine_status"],
    version: number | null,
    floor: number | null,
    runBegan: boolean,
  ): Pick<Meta, "weightVersion" | "syncingToVersion" | "versionFloor"> {
    const wasSyncing = prev.status === "ENGINE.WEIGHT_SYNCING";
    if (status === "ENGINE.WEIGHT_SYNCING") {
      return { weightVersion: prev.weightVersion, syncingToVersion: version ?? (wasSyncing && !runBegan ? prev.syncingToVersion : null), versionFloor: floor };
    }
    const taken = version ?? (wasSyncing && !runBegan && status !== "ENGINE.OFFLINE" ? prev.syncingToVersion : null);
    return { weightVersion: taken ?? prev.weightVersion, syncingToVersion: null, versionFloor: taken ?? floor };
  }

  /**
   * Sets keep_claims_across_sync, sync_hold_seconds and max_sync_seconds. Turning
   * keep_claims_across_sync over is refused while a weight sync keeps claims (or would, were it
   * on): it would leave claims with no status to live in, or clear a pool AgentJet expects cleared
   * already. The other two may change during a sync; the alarm follows max_sync_seconds at once.
   */
  configureSync(patch: UpdateSyncConfigRequest): Reply<SyncConfig> {
    const meta = this.store.meta;
    const next = { ...meta.sync, ...patch };
    if (meta.status === "ENGINE.WEIGHT_SYNCING" && next.keep_claims_across_sync !== meta.sync.keep_claims_across_sync) {
      return fail(409, "engine_syncing", "keep_claims_across_sync cannot change during ENGINE.WEIGHT_SYNCING; change it while the engine rolls or is offline.");
    }
    this.store.saveMeta({ ...meta, sync: next });
    this.episodes.armForLeases();
    return ok(next);
  }

  /** The agent reports that the trainer process ended: the engine goes OFFLINE, saying how. */
  trainerExited(req: TrainerExitRequest): void {
    // The exit of a trainer a later start replaced: the report came again, or late. Agents older
    // than start_seq send none, and are taken at their word as before.
    if (req.start_seq !== null && this.store.meta.startSeq !== null && req.start_seq !== this.store.meta.startSeq) return;
    // The trainer of an engine of this name deleted since: its start seqs are this engine's too.
    if (req.start_incarnation !== undefined && req.start_incarnation !== this.store.meta.incarnation) return;
    const how = req.signal !== null ? `was killed by ${req.signal}` : `exited with code ${req.exit_code ?? "unknown"}`;
    const detail = `trainer ${how}` + (req.log_tail ? `; last output:\n${req.log_tail}` : "");
    this.clearEpisodes();
    this.store.saveMeta({ ...this.store.meta, status: "ENGINE.OFFLINE", bootingStartTime: null, detail });
  }

  /** The agent answered a start command: a trainer that failed to start leaves the engine OFFLINE. */
  started(succeeded: boolean, detail: string): void {
    if (!succeeded && this.store.meta.status === "ENGINE.BOOTING") {
      this.store.saveMeta({ ...this.store.meta, status: "ENGINE.OFFLINE", bootingStartTime: null, detail: `trainer failed to start: ${detail}` });
    }
  }

  /**
   * Begins a run of the history: the current step's rewards are written to the run they were
   * earned in, and the accumulator starts empty. A current run with nothing in it yet (no step
   * written, no reward counted, no buffer group) is kept instead, with what this beginning says
   * of it: a start is usually told twice (start_engine, then the trainer's own BOOTING or ROLLING).
   */
  beginRun(began: RunBeginning, trainingRunId: string | null = null, note = ""): { run: number; newRun: boolean } {
    const meta = this.store.meta;
    if (meta.run !== 0 && !this.runs.holdsAnything(meta.run) && this.liveAcc().n === 0) {
      this.runs.amend(meta.run, trainingRunId, note);
      // A beginning all the same (a restart told once more): the weight version may start lower again.
      if (meta.versionFloor !== null) this.store.saveMeta({ ...meta, versionFloor: null });
      return { run: meta.run, newRun: false };
    }
    if (meta.run !== 0 && meta.globalStep !== null) this.finalizeStep(meta.globalStep);
    const run = this.runs.add(began, this.host.now(), trainingRunId, note);
    this.store.saveMeta({ ...this.store.meta, run, acc: EMPTY_ACCUMULATOR, accEpoch: this.store.meta.accEpoch + 1, versionFloor: null });
    return { run, newRun: true };
  }

  /**
   * An engine that was active when it was given runs, with no history to make its earlier run
   * of (schema migration 6), begins one now: whatever it records next belongs to a run.
   */
  ensureRun(): void {
    if (this.store.meta.run === 0 && this.store.meta.status !== "ENGINE.OFFLINE") this.beginRun("trainer_started");
  }

  /** The reward history of `q.run`, or of the current run; null when there is no such run. */
  history(q: RewardHistoryQuery): { history: ReturnType<HistoryRuns["history"]>; run: number | null } | null {
    const run = q.run ?? this.store.meta.run;
    if (q.run !== undefined && !this.runs.exists(q.run)) return null;
    return run === 0 ? { history: [], run: null } : { history: this.runs.history(run), run };
  }

  /**
   * The episodes counted toward the current step, not yet in the reward history: liveAcc's
   * episodes, counted in SQL rather than folded row by row, since a viewer's runs list asks for it.
   */
  currentStepEpisodes(): number {
    const rows = this.store.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM finished WHERE acc_epoch = ?", this.store.meta.accEpoch).one().n;
    return this.store.meta.acc.episodes + rows;
  }

  /**
   * "all": the engine stops or starts; "phase": a rolling phase ends (every claim goes, the ends
   * are remembered a while for their repeats); "finished": a sync that keeps claims ends the batch.
   */
  private clearEpisodes(which: "all" | "phase" | "finished" = "all"): void {
    // The current step's rewards outlive their rows: folded into the meta, under a new epoch.
    this.store.saveMeta({ ...this.store.meta, acc: this.liveAcc(), accEpoch: this.store.meta.accEpoch + 1 });
    if (which === "finished") this.episodes.clearFinished();
    else this.episodes.clearAll(which === "phase");
  }

  /**
   * The current step's accumulator: the meta's part and the rewards of this epoch's finished
   * rows. Read when a step ends or its rows are cleared, not on every end, so ends write no
   * meta; it scans the finished rows (those of the current rolling phase), once per step.
   */
  private liveAcc(): RewardAccumulator {
    let acc = this.store.meta.acc;
    const rows = this.store.sql.exec<{ reward: number; reward_values: string | null }>(
      "SELECT reward, reward_values FROM finished WHERE acc_epoch = ? ORDER BY ended_at",
      this.store.meta.accEpoch,
    );
    for (const r of rows) acc = accumulate(acc, r.reward_values === null ? [r.reward] : (JSON.parse(r.reward_values) as number[]));
    return acc;
  }

  /** Writes the step's reward history entry, if it had rewards; the caller starts the next epoch. */
  private finalizeStep(step: number): void {
    const acc = this.liveAcc();
    if (acc.n === 0) return;
    const s = summarize(acc);
    const timestamp = this.host.now() / 1000;
    const seq = this.store.sql
      .exec<{ seq: number }>(
        "INSERT INTO reward_history (run, global_step, mean_reward, std_reward, count, episodes, min_reward, max_reward, timestamp) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",
        this.store.meta.run,
        step,
        s.mean,
        s.std,
        s.count,
        s.episodes,
        s.min,
        s.max,
        timestamp,
      )
      .one().seq;
    this.host.addOutbox({
      kind: "reward",
      row: { engine: this.store.meta.name ?? "", seq, run: this.store.meta.run, globalStep: step, meanReward: s.mean, stdReward: s.std, count: s.count, minReward: s.min, maxReward: s.max, timestamp },
    });
  }
}
