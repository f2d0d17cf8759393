/**
 * What `npm run bench` reports (bench/run.ts) and its chart draws (bench/chart.ts): the JSON of
 * bench/results/latest.json and bench/recorded.json.
 */
import type { LoadResult } from "./loadgen";
import type { PoolInfoResult } from "./poolinfo";
import type { OpProfile } from "./profile";

export type TargetName = "engine" | "reference";

export type RoundSummary = { cycles_per_s: number; claim_p50_ms: number; end_p50_ms: number; server_cpu_ms_per_cycle: number | null; errors: number; other_cpu_pct: number };

export type PoolInfoAfterLoad = { finished_rows: number; ms: PoolInfoResult["ms"]; bytes: number };

export type BenchReport = {
  started_at: string;
  machine: { cores: number; cpu: string; node: string; loadavg_at_start: number[] };
  settings: { duration_s: number; rounds: number; warmup_s: number; state_dir: string; fresh_processes_per_round: boolean; reference_group_commit: boolean };
  /** Per target and configuration: the round with the median cycles/s, every round's summary, and pool info after the load. */
  loads: Partial<Record<TargetName, (LoadResult & { rounds: RoundSummary[]; pool_info_after: PoolInfoAfterLoad })[]>>;
  pool_info: Partial<Record<TargetName, PoolInfoResult[]>>;
  profile: Partial<Record<TargetName, OpProfile[]>>;
  comparison: Comparison;
};

export type Check = { target: string; value: string; met: boolean | null };
export type Side<T extends TargetName> = {
  [K in `${T}_cycles_per_s` | `${T}_claim_p50_ms` | `${T}_end_p50_ms` | `${T}_errors` | `${T}_other_cpu_pct`]?: number;
} & { [K in `${T}_cpu_ms_per_cycle`]?: number | null };
/** One load configuration, both targets side by side. */
export type LoadComparison = Side<"engine"> &
  Side<"reference"> & {
    label: string;
    /** engine cycles/s over the reference's */
    ratio?: number;
    /** engine workerd CPU per cycle over the reference's */
    cpu_ratio?: number;
  };
export type Comparison = {
  per_load: LoadComparison[];
  claim_p50_10k_over_256: Partial<Record<TargetName, number>>;
  checks: Check[];
};
