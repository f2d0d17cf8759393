/**
 * `npm run bench:capture-ab [-- --capture tokens]`: the engine's claim -> end -> register cycles
 * with the trajectory ledger's capture off and on (issue 21's target: at most 5% fewer cycles/s
 * with capture on), in alternating rounds on one engine in one workerd: the capture is set
 * through the engine's API before each round, the order flips from round to round (off on,
 * on off, ...), so the same processes and the same machine state serve both.
 *
 * Flags: --capture MODE (tokens: the mode compared with off) --clients N (32) --episodes N (256)
 *        --rounds N (8) --round S (6) --warmup S (4) --tmpdir DIR (default /dev/shm).
 * Prints JSON to stdout: each mode's mean cycles/s and workerd CPU per cycle, the ratio of
 * cycles/s on to off, and the paired differences round by round.
 */
import { cpus, loadavg } from "node:os";
import { LedgerClient } from "../src/client";
import { CaptureMode } from "../src/protocol/ledger";
import { parseFlags } from "./flags";
import { Http } from "./load/http";
import { prepareEngine, runLoad } from "./loadgen";
import { serveEngine } from "./serve/exchange";
import { mean, paired, stateInMemory } from "./stats";

const flags = parseFlags(process.argv.slice(2));
const num = (k: string, d: number): number => Number(flags.get(k) ?? d);
const log = (line: string): void => void process.stderr.write(`[bench:capture-ab] ${line}\n`);

async function main(): Promise<void> {
  const on = CaptureMode.parse(flags.get("capture") ?? "tokens");
  if (on === "off") throw new Error("--capture: the mode to compare with off (messages or tokens)");
  stateInMemory(flags.get("tmpdir"));
  const clients = num("clients", 32);
  const episodes = num("episodes", 256);
  const rounds = num("rounds", 8);
  const roundS = num("round", 6);
  const warmupS = num("warmup", 4);
  const startedAt = new Date().toISOString();
  const loadBefore = loadavg();
  const engine = await serveEngine({ prefix: "capture-ab" });
  const pids = engine.pids;
  const cps = new Map<CaptureMode, number[]>([["off", []], [on, []]]);
  const cpu = new Map<CaptureMode, number[]>([["off", []], [on, []]]);
  try {
    const http = new Http(engine.baseUrl, 40);
    await prepareEngine(http, engine.trainerToken, episodes).finally(() => http.close());
    const ledger = new LedgerClient({ baseUrl: engine.baseUrl, token: engine.operatorToken });
    for (let i = 0; i < rounds; i++) {
      for (const mode of i % 2 === 0 ? (["off", on] as const) : ([on, "off"] as const)) {
        const set = await ledger.configure({ capture: mode });
        if (set.capture !== mode) throw new Error(`the engine's capture is ${set.capture}, not ${mode}`);
        const r = await runLoad({ ...engine, clients, episodes, durationSec: roundS, warmupSec: i === 0 ? warmupS : 2, setup: false, serverPids: pids });
        if (r.server_cpu_ms_per_cycle === null) throw new Error("no workerd CPU figure: is /proc readable?");
        if (r.errors > 0) throw new Error(`capture ${mode}: ${r.errors} errors, e.g. ${r.error_samples[0] ?? "?"}`);
        cps.get(mode)!.push(r.cycles_per_s);
        cpu.get(mode)!.push(r.server_cpu_ms_per_cycle);
        log(`round ${i + 1}/${rounds} capture ${mode.padEnd(8)} ${r.cycles_per_s} cycles/s, ${r.server_cpu_ms_per_cycle} ms workerd CPU per cycle, others ${r.other_cpu_pct}% of a core`);
      }
    }
  } finally {
    await engine.stop();
  }
  const c = paired(cps.get(on)!, cps.get("off")!);
  const report = {
    started_at: startedAt,
    load: `${clients}x${episodes}`,
    rounds,
    round_s: roundS,
    cpus: cpus().length,
    load_average_before: loadBefore,
    load_average_after: loadavg(),
    node: process.version,
    cycles_per_s: { off: mean(cps.get("off")!), [on]: mean(cps.get(on)!) },
    /** Cycles/s with capture on over off: the target is at least 0.95. */
    ratio_on_to_off: Math.round((c.this / c.against) * 1000) / 1000,
    /** On minus off, round by round, with its standard error; and in how many rounds capture on made fewer cycles. */
    cycles_per_s_difference: { mean: c.diff, se: c.se, on_lower_in_rounds: c.this_cheaper_in },
    cpu_ms_per_cycle: { off: mean(cpu.get("off")!), [on]: mean(cpu.get(on)!) },
    per_round: { cycles_per_s: Object.fromEntries(cps), cpu_ms_per_cycle: Object.fromEntries(cpu) },
  };
  console.log(JSON.stringify(report, null, 2));
  log(`cycles/s: off ${report.cycles_per_s.off}, ${on} ${report.cycles_per_s[on]} (ratio ${report.ratio_on_to_off}); difference ${c.diff} +- ${c.se}`);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
