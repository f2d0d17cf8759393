/**
 * `npm run bench:staleness [-- --record]`: the staleness policies in a seeded simulation
 * (sim.ts) of asynchronous RL with heavy-tailed rollouts, drop against pace (and flag, the lag
 * nothing checks), for several max_staleness values. Pace runs the engine's own rule
 * (src/engine/pacing.ts). Prints the report as JSON; writes bench/results/staleness-latest.{json,svg},
 * and with --record bench/staleness/recorded.{json,svg}, the run BENCHMARKS.md quotes.
 *
 * Flags: --workers N (256), --batch N (256), --step S (60), --median S (60), --sigma X (1),
 * --hours H (6), --staleness 2,4,8, --seed N (7).
 */
import { fileURLToPath } from "node:url";
import { parseFlags } from "../flags";
import { writeBenchOutputs } from "../stats";
import { renderStalenessChart } from "./chart";
import { simulate, type SimResult, type SimSettings } from "./sim";

export type StalenessBenchReport = {
  started_at: string;
  command: string;
  settings: Omit<SimSettings, "maxStaleness">;
  /** The share of log-normal durations above 10x the median, for these settings. */
  tail_share: number;
  runs: { max_staleness: number; drop: SimResult; pace: SimResult; flag: SimResult }[];
};

/** P(X > 10 median) for a log-normal of this sigma: the normal tail at ln(10)/sigma. */
function tailShare(sigma: number): number {
  const z = Math.log(10) / sigma;
  // Abramowitz and Stegun 26.2.17, within 1e-7.
  const t = 1 / (1 + 0.2316419 * z);
  const poly = t * (0.31938153 + t * (-0.356563782 + t * (1.781477937 + t * (-1.821255978 + t * 1.330274429))));
  return (Math.exp((-z * z) / 2) / Math.sqrt(2 * Math.PI)) * poly;
}

async function main(): Promise<void> {
  const f = parseFlags(process.argv.slice(2));
  const settings: Omit<SimSettings, "maxStaleness"> = {
    workers: Number(f.get("workers") ?? 256),
    medianSeconds: Number(f.get("median") ?? 60),
    sigma: Number(f.get("sigma") ?? 1),
    batch: Number(f.get("batch") ?? 256),
    stepSeconds: Number(f.get("step") ?? 60),
    horizonSeconds: Number(f.get("hours") ?? 6) * 3600,
    retrySeconds: 2,
    seed: Number(f.get("seed") ?? 7),
  };
  const bounds = (f.get("staleness") ?? "2,4,8").split(",").map(Number);
  const runs = bounds.map((maxStaleness) => {
    const s = { ...settings, maxStaleness };
    const run = { max_staleness: maxStaleness, drop: simulate("drop", s), pace: simulate("pace", s), flag: simulate("flag", s) };
    process.stderr.write(
      `[bench:staleness] max_staleness ${maxStaleness}: drop discards ${(run.drop.discarded_fraction * 100).toFixed(1)}% (bias ${run.drop.duration_bias}), pace ${(run.pace.discarded_fraction * 100).toFixed(1)}% (bias ${run.pace.duration_bias}, worst lag ${run.pace.lag.max}, ${run.pace.delivered_per_hour}/h against ${run.drop.delivered_per_hour}/h)\n`,
    );
    return run;
  });
  const report: StalenessBenchReport = {
    started_at: new Date().toISOString(),
    command: `npm run bench:staleness -- ${process.argv.slice(2).join(" ")}`.trim(),
    settings,
    tail_share: Number(tailShare(settings.sigma).toFixed(4)),
    runs,
  };
  const json = JSON.stringify(report, null, 2) + "\n";
  await writeBenchOutputs(fileURLToPath(new URL(".", import.meta.url)), "staleness", json, renderStalenessChart(report), f.has("record"));
  process.stdout.write(json);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((e: unknown) => {
    console.error(e);
    process.exit(1);
  });
}
