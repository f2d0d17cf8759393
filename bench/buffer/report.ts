/**
 * What `npm run bench:buffer` reports (bench/buffer/run.ts) and its chart draws
 * (bench/buffer/chart.ts): the JSON of bench/buffer/recorded.json.
 */
import type { Latency } from "../stats";
import type { IngestResult } from "./workload";

export type PullResult = { pending_groups: number; ready_pull_ms: Latency; empty_pull_ms: Latency; server_cpu_ms_per_sample: number | null; other_cpu_pct: number };
export type BufferBenchReport = {
  started_at: string;
  machine: { cores: number; cpu: string; node: string; loadavg_at_start: number[] };
  settings: { posters: number; batches: number; samples_per_engine: number; rounds: number; group_size: number };
  ingest: IngestResult;
  /** server_cpu_ms_per_sample: the engine's CPU for one sample (posting one group, then two pulls). */
  pulls: PullResult[];
  /** 10,000 pending over 100 pending; at most 2 (the log factor) passes. */
  ratios: { ready_p50: number; ready_p99: number; empty_p50: number; cpu_per_sample: number | null };
};
