/**
 * What `npm run bench` makes of its measurements: the load configurations, the median round that
 * stands for a target, and the comparison of the engine with the limit reference against the
 * issue's targets (and the seed's figures, which the engine had to beat).
 */
import type { LoadResult } from "./loadgen";
import type { BenchReport, Check, Comparison, Side, TargetName } from "./report";

export const LOADS = [
  { label: "32x256", clients: 32, episodes: 256 },
  { label: "128x256", clients: 128, episodes: 256 },
  { label: "32x10000", clients: 32, episodes: 10_000 },
] as const;

/** The seed's figures, as the issue gives them (the seed was not measured here): the engine had to beat them. */
const SEED = { cycles_256: 160, cycles_10k: 55, claim_p50_256_ms: 71, claim_p50_10k_ms: 215, pool_info_10k_ms: 500 };

/** The round with the median cycles/s (the lower middle one for an even count); errors and retries summed over all rounds. */
export function medianRound(results: LoadResult[]): LoadResult {
  const sorted = [...results].sort((a, b) => a.cycles_per_s - b.cycles_per_s);
  const mid = sorted[Math.floor((sorted.length - 1) / 2)]!;
  return {
    ...mid,
    retries: results.reduce((a, r) => a + r.retries, 0),
    errors: results.reduce((a, r) => a + r.errors, 0),
    error_samples: results.flatMap((r) => r.error_samples).slice(0, 5),
  };
}

function side<T extends TargetName>(t: T, r: LoadResult): Side<T> {
  return {
    [`${t}_cycles_per_s`]: r.cycles_per_s,
    [`${t}_claim_p50_ms`]: r.claim_ms.p50,
    [`${t}_end_p50_ms`]: r.end_ms.p50,
    [`${t}_cpu_ms_per_cycle`]: r.server_cpu_ms_per_cycle,
    [`${t}_errors`]: r.errors,
    [`${t}_other_cpu_pct`]: r.other_cpu_pct,
  } as Side<T>;
}

export function compare(report: Omit<BenchReport, "comparison">): Comparison {
  const find = (t: TargetName, label: string) => report.loads[t]?.find((r) => r.label === label);
  const per_load = LOADS.map(({ label }) => {
    const e = find("engine", label);
    const r = find("reference", label);
    return {
      label,
      ...(e ? side("engine", e) : {}),
      ...(r ? side("reference", r) : {}),
      ...(e && r && r.cycles_per_s > 0 ? { ratio: round(e.cycles_per_s / r.cycles_per_s, 2) } : {}),
      ...(e?.server_cpu_ms_per_cycle && r?.server_cpu_ms_per_cycle ? { cpu_ratio: round(e.server_cpu_ms_per_cycle / r.server_cpu_ms_per_cycle, 2) } : {}),
    };
  }).filter((p) => p.engine_cycles_per_s !== undefined || p.reference_cycles_per_s !== undefined);

  const claim_p50_10k_over_256: Partial<Record<TargetName, number>> = {};
  for (const t of ["engine", "reference"] as const) {
    const a = find(t, "32x256");
    const b = find(t, "32x10000");
    if (a && b && a.claim_ms.p50 > 0) claim_p50_10k_over_256[t] = round(b.claim_ms.p50 / a.claim_ms.p50, 2);
  }

  const checks: Check[] = [];
  for (const p of per_load) {
    if (p.ratio !== undefined) checks.push({ target: `${p.label}: engine >= 0.8x reference cycles/s`, value: `${p.ratio}x`, met: p.ratio >= 0.8 });
  }
  const q = claim_p50_10k_over_256.engine;
  if (q !== undefined) checks.push({ target: "engine claim p50 at 10,000 <= 1.5x p50 at 256 (32 clients)", value: `${q}x`, met: q <= 1.5 });
  const pi = report.pool_info.engine;
  const at = (r: number, c: number) => pi?.find((x) => x.registered === r && x.claimed === c);
  const small = at(256, 8);
  const big = at(10_000, 8);
  const bigClaimed = at(10_000, 256);
  if (small && big) {
    const k = round(big.ms.p50 / small.ms.p50, 2);
    checks.push({
      target: "pool info O(claimed): p50 with 10,000 registered <= 1.5x p50 with 256 (8 claimed each)",
      value: `${small.ms.p50} ms -> ${big.ms.p50} ms (${k}x)${bigClaimed ? `; 256 claimed: ${bigClaimed.ms.p50} ms` : ""}`,
      met: k <= 1.5,
    });
  }
  const e256 = find("engine", "32x256");
  const e10k = find("engine", "32x10000");
  if (e256) checks.push({ target: `beat the seed 2x at 256 (>= ${2 * SEED.cycles_256} cycles/s, 32 clients)`, value: `${e256.cycles_per_s}/s (${round(e256.cycles_per_s / SEED.cycles_256, 2)}x seed)`, met: e256.cycles_per_s >= 2 * SEED.cycles_256 });
  const e128 = find("engine", "128x256");
  if (e128) checks.push({ target: `beat the seed 2x at 256 (>= ${2 * SEED.cycles_256} cycles/s, 128 clients)`, value: `${e128.cycles_per_s}/s (${round(e128.cycles_per_s / SEED.cycles_256, 2)}x seed)`, met: e128.cycles_per_s >= 2 * SEED.cycles_256 });
  if (e10k) checks.push({ target: `beat the seed 5x at 10,000 (>= ${5 * SEED.cycles_10k} cycles/s)`, value: `${e10k.cycles_per_s}/s (${round(e10k.cycles_per_s / SEED.cycles_10k, 2)}x seed)`, met: e10k.cycles_per_s >= 5 * SEED.cycles_10k });
  return { per_load, claim_p50_10k_over_256, checks };
}

export const round = (x: number, d: number) => Math.round(x * 10 ** d) / 10 ** d;

