/**
 * `npm run bench`'s measurement of one load configuration on every target: one engine per
 * target, filled once; then `rounds` measured windows per target, the targets taking turns
 * (E R, R E, ...) so that a busy phase of the machine hits both alike. The round with the median
 * cycles/s stands for the target, followed by one look at pool info after the load.
 */
import { medianRound, round, type LOADS } from "./compare";
import { Http } from "./load/http";
import { prepareEngine, runLoad, type LoadResult } from "./loadgen";
import { timePoolInfo } from "./poolinfo";
import type { BenchReport, TargetName } from "./report";
import type { EngineTokens } from "./serve/reference";
import { startTarget, type Target } from "./targets";

export type RoundsOptions = {
  duration: number;
  rounds: number;
  warmup: number;
  /** New processes (and engines) for every target before every round after the first. */
  fresh: boolean;
  referenceGroupCommit: boolean;
  /** Waits for a quiet machine before a run. */
  quiet(what: string): Promise<void>;
  log(line: string): void;
};

type LoadReport = NonNullable<BenchReport["loads"][TargetName]>[number];

/** Measures `load` on `targets`; with `fresh` it replaces the targets in the array as it restarts them. */
export async function measureLoad(load: (typeof LOADS)[number], targets: Target[], o: RoundsOptions): Promise<Map<TargetName, LoadReport>> {
  const { log } = o;
  const engines = new Map<TargetName, EngineTokens>();
  const prepare = async (t: Target): Promise<void> => {
    const eng = await t.newEngine(load.label);
    log(`${t.name} ${load.label}: registering ${load.episodes}`);
    const http = new Http(eng.baseUrl, 40);
    await prepareEngine(http, eng.trainerToken, load.episodes, log).finally(() => http.close());
    engines.set(t.name, eng);
  };
  for (const t of targets) await prepare(t);
  const perRound = round(o.duration / o.rounds, 1);
  const got = new Map<TargetName, LoadResult[]>();
  /** Episodes ended on each target's current engine (fresh engines start from none). */
  const ended = new Map<TargetName, number>();
  for (let i = 0; i < o.rounds; i++) {
    if (o.fresh && i > 0) {
      for (let k = 0; k < targets.length; k++) {
        const old = targets[k]!;
        await old.stop();
        const t = await startTarget(old.name, o);
        log(`${t.name}: fresh processes for round ${i + 1}, ${t.origin}, workerd pid(s) ${t.pids.join(",") || "?"}`);
        targets[k] = t;
        await prepare(t);
        ended.set(t.name, 0);
      }
    }
    for (const t of i % 2 === 0 ? targets : [...targets].reverse()) {
      const eng = engines.get(t.name)!;
      const w = i === 0 || o.fresh ? o.warmup : Math.min(o.warmup, 2);
      log(`${t.name} ${load.label} round ${i + 1}/${o.rounds}: ${load.clients} clients for ${w}+${perRound} s`);
      const res = await runLoad({
        ...eng,
        clients: load.clients,
        episodes: load.episodes,
        durationSec: perRound,
        warmupSec: w,
        setup: false,
        label: load.label,
        serverPids: t.pids,
        log,
        beforeLoad: () => o.quiet(`${t.name} ${load.label}`),
      });
      log(
        `${t.name} ${load.label} round ${i + 1}: ${res.cycles_per_s} cycles/s, claim p50 ${res.claim_ms.p50} ms p99 ${res.claim_ms.p99} ms, end p50 ${res.end_ms.p50} ms, ` +
          `retries ${res.retries}, errors ${res.errors}, CPU % of a core: bench ${res.loadgen_cpu_pct}, workerd ${res.server_cpu_pct} (${res.server_cpu_ms_per_cycle} ms/cycle), others ${res.other_cpu_pct}`,
      );
      for (const e of res.error_samples) log(`  error: ${e}`);
      got.set(t.name, [...(got.get(t.name) ?? []), res]);
      ended.set(t.name, (ended.get(t.name) ?? 0) + res.ended_total);
    }
  }
  const out = new Map<TargetName, LoadReport>();
  for (const t of targets) {
    const results = got.get(t.name)!;
    const eng = engines.get(t.name)!;
    const http = new Http(eng.baseUrl, 2);
    const after = await timePoolInfo(http, eng.trainerToken, load.episodes, 0, 10).finally(() => http.close());
    out.set(t.name, {
      ...medianRound(results),
      rounds: results.map((r) => ({ cycles_per_s: r.cycles_per_s, claim_p50_ms: r.claim_ms.p50, end_p50_ms: r.end_ms.p50, server_cpu_ms_per_cycle: r.server_cpu_ms_per_cycle, errors: r.errors, other_cpu_pct: r.other_cpu_pct })),
      pool_info_after: { finished_rows: ended.get(t.name) ?? 0, ms: after.ms, bytes: after.bytes },
    });
  }
  return out;
}
