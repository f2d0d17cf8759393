/**
 * The engine's status machine (OFFLINE, BOOTING, ROLLING, ...: seeds/swarm_server.py.txt) and
 * the reward history it writes as the trainer's global step moves on. A rolling phase that ends
 * clears its episodes; its rewards outlive them, folded into the meta's accumulator, so that a
 * status change never loses the step's history (the seed clears it before it is written).
 * Methods that write run inside the transaction their caller opens.
 */
import type { BoolResponse, EngineStatusResponse, UpdateEngineStatusRequest } from "../protocol/swarm";
import type { CommandBody } from "../protocol/commands";
import type { TrainerExitRequest } from "../protocol/agent";
import { isRolling } from "../protocol/status";
import { storedStringTooLarge } from "../protocol/limits";
import type { EngineStore, Meta } from "./engine-store";
import type { Episodes } from "./episodes";
import type { OutboxItem } from "./outbox";
import { fail, ok, type Reply } from "./reply";
import { EMPTY_ACCUMULATOR, accumulate, summarize, type RewardAccumulator } from "./rules";

export type StatusHost = {
  now(): number;
  addOutbox(item: OutboxItem): void;
  enqueue(body: CommandBody): void;
};

export class StatusAndRewards {
  constructor(
    private readonly store: EngineStore,
    private readonly episodes: Episodes,
    private readonly host: StatusHost,
  ) {}

  view(): EngineStatusResponse {
    const m = this.store.meta;
    return { engine_status: m.status, engine_status_detail: m.detail, global_step: m.globalStep };
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
    if (this.store.meta.status !== "ENGINE.OFFLINE") {
      return fail(409, "engine_started", `Engine is already started (status ${this.store.meta.status}). Call /stop_engine first.`);
    }
    this.clearEpisodes();
    this.store.saveMeta({ ...this.store.meta, status: "ENGINE.BOOTING", bootingStartTime: this.host.now() / 1000, detail: null });
    this.host.enqueue({ kind: "start", yaml_as_string: yaml });
    return ok({ success: true as const });
  }

  stop(): void {
    this.clearEpisodes();
    this.store.saveMeta({ ...this.store.meta, status: "ENGINE.OFFLINE", bootingStartTime: null });
    this.host.enqueue({ kind: "stop", reason: "stop_engine requested" });
  }

  update(req: UpdateEngineStatusRequest): BoolResponse {
    const prev = this.store.meta;
    if (isRolling(prev.status) && !isRolling(req.engine_status)) this.clearEpisodes();
    // From the store, not prev: clearing may have moved the fence floor.
    const next: Meta = { ...this.store.meta, status: req.engine_status };
    if (req.engine_status === "ENGINE.BOOTING" && prev.status !== "ENGINE.BOOTING") next.bootingStartTime = this.host.now() / 1000;
    if (prev.status === "ENGINE.BOOTING" && req.engine_status !== "ENGINE.BOOTING") next.bootingStartTime = null;
    if (req.global_step !== undefined && req.global_step !== null) {
      if (prev.globalStep !== null && prev.globalStep !== req.global_step) {
        this.finalizeStep(prev.globalStep);
        next.acc = EMPTY_ACCUMULATOR;
        next.accEpoch = this.store.meta.accEpoch + 1;
      }
      next.globalStep = req.global_step;
    }
    if (req.engine_status_detail !== undefined && req.engine_status_detail !== null) next.detail = req.engine_status_detail;
    if (req.weight_version !== undefined && req.weight_version !== null) next.weightVersion = req.weight_version;
    this.store.saveMeta(next);
    return { success: true, failure_reason: "" };
  }

  /** The agent reports that the trainer process ended: the engine goes OFFLINE, saying how. */
  trainerExited(req: TrainerExitRequest): void {
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

  private clearEpisodes(): void {
    // The current step's rewards outlive their rows: folded into the meta, under a new epoch.
    this.store.saveMeta({ ...this.store.meta, acc: this.liveAcc(), accEpoch: this.store.meta.accEpoch + 1 });
    this.episodes.clearAll();
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
        "INSERT INTO reward_history (global_step, mean_reward, std_reward, count, min_reward, max_reward, timestamp) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING seq",
        step,
        s.mean,
        s.std,
        s.count,
        s.min,
        s.max,
        timestamp,
      )
      .one().seq;
    this.host.addOutbox({
      kind: "reward",
      row: { engine: this.store.meta.name ?? "", seq, globalStep: step, meanReward: s.mean, stdReward: s.std, count: s.count, minReward: s.min, maxReward: s.max, timestamp },
    });
  }
}
