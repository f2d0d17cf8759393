/**
 * The engine's small, hot state (Meta), kept in memory and written through to its kv table,
 * and that table itself: what every part of the engine reads and writes besides its own tables.
 */
import type { EngineStatus } from "../protocol/status";
import { DEFAULT_SYNC_CONFIG, type SyncConfig } from "../protocol/sync";
import { EMPTY_ACCUMULATOR, type RewardAccumulator } from "./rules";

export type Meta = {
  name: string | null;
  status: EngineStatus;
  /**
   * When the engine entered its status (ms), set by saveMeta whichever write changes it: a sync
   * or a boot that never ends looks like a short one otherwise. For an engine whose meta predates
   * the field, the start of its sync or boot when known, else null.
   */
  statusSince: number | null;
  detail: string | null;
  globalStep: number | null;
  weightVersion: number | null;
  bootingStartTime: number | null;
  /**
   * The current step's rewards that are no longer in finished rows (cleared with their rolling
   * phase, or written before rows kept them); the rest are the rows of epoch accEpoch (liveAcc).
   */
  acc: RewardAccumulator;
  /** Which finished rows count toward the current step: those written with this epoch. */
  accEpoch: number;
  /** At least every fence this engine has issued; kept for when the rows that held them are gone. */
  fenceFloor: number;
  /** Told apart from an engine of the same name deleted before it ("" for engines made before this field): claim keys name it. */
  incarnation: string;
  /**
   * Goes up each time a token that may read the gateway secret (a trainer's) is revoked: the
   * secret is derived from the name, the incarnation and this (gateway-signature.ts), so what a
   * revoked token fetched no longer signs anything the gateway accepts.
   */
  gatewayGeneration: number;
  /** The current run of the engine's history (history-runs.ts); 0 until the first one begins. */
  run: number;
  /** Whether claims survive ENGINE.WEIGHT_SYNCING, and how long relayed calls wait for a sync (protocol/sync.ts). */
  sync: SyncConfig;
  /** When the weight sync the claims are kept through began (ms); null when none is under way. */
  syncingSince: number | null;
  /**
   * The version a trainer reported with ENGINE.WEIGHT_SYNCING: the weights it is syncing to. They
   * serve no call until the sync ends, so weightVersion stays the old one until then; null when none.
   */
  syncingToVersion: number | null;
  /**
   * The weight version last taken in the current run, below which a report of the same run is
   * refused as late (status-and-rewards.ts); null once a run begins, since a restarted trainer
   * may start lower again.
   */
  versionFloor: number | null;
  /**
   * The seq of the latest start command: an agent's report that a trainer exited names the start
   * that launched it, so a report sent again after a later start (its answer lost, retried with
   * backoff) does not take the new trainer's engine OFFLINE. Null before the first start.
   */
  startSeq: number | null;
};

const INITIAL_META: Meta = {
  name: null,
  status: "ENGINE.OFFLINE",
  statusSince: null,
  detail: null,
  globalStep: null,
  weightVersion: null,
  bootingStartTime: null,
  acc: EMPTY_ACCUMULATOR,
  accEpoch: 0,
  fenceFloor: 0,
  incarnation: "",
  gatewayGeneration: 0,
  run: 0,
  sync: DEFAULT_SYNC_CONFIG,
  syncingSince: null,
  syncingToVersion: null,
  versionFloor: null,
  startSeq: null,
};

export class EngineStore {
  meta: Meta;

  constructor(
    readonly sql: SqlStorage,
    private readonly now: () => number,
  ) {
    this.meta = this.loadMeta();
  }

  saveMeta(next: Meta): void {
    if (next.status !== this.meta.status) next = { ...next, statusSince: this.now() };
    this.setKv("meta", next);
    this.meta = next;
  }

  /** Reads the meta again: a transaction that wrote it rolled back. */
  reload(): void {
    this.meta = this.loadMeta();
  }

  getKv<T>(k: string): T | null {
    const row = this.sql.exec<{ v: string }>("SELECT v FROM kv WHERE k = ?", k).toArray()[0];
    return row ? (JSON.parse(row.v) as T) : null;
  }

  setKv(k: string, v: unknown): void {
    this.sql.exec("INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v", k, JSON.stringify(v));
  }

  private loadMeta(): Meta {
    const stored = this.getKv<Partial<Meta>>("meta");
    // A new engine has been OFFLINE since it was made: its first save (provisioning) keeps this.
    if (stored === null) return { ...INITIAL_META, statusSince: this.now() };
    // A sync config written before a field of it existed takes that field's default.
    const meta: Meta = { ...INITIAL_META, ...stored, sync: { ...DEFAULT_SYNC_CONFIG, ...stored.sync } };
    // An accumulator saved before it counted episodes is taken at its values: one an episode, unless rewards were lists.
    if (stored.acc !== undefined && typeof stored.acc.episodes !== "number") meta.acc = { ...stored.acc, episodes: stored.acc.n };
    if (stored.statusSince === undefined) meta.statusSince = legacyStatusSince(meta);
    return meta;
  }
}

/** When a meta saved before statusSince existed entered its status, where another field says. */
function legacyStatusSince(m: Meta): number | null {
  if (m.status === "ENGINE.WEIGHT_SYNCING") return m.syncingSince;
  if (m.status === "ENGINE.BOOTING" && m.bootingStartTime !== null) return m.bootingStartTime * 1000;
  return null;
}
