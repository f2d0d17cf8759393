/**
 * `npm run bench:ab -- --against DIR`: this tree's engine against another tree's (a git
 * worktree of main, say), under the benchmark's load, in alternating rounds.
 *
 * A whole `npm run bench` swings by about 10% from run to run on a shared 2-core machine, more
 * than most single changes are worth. Here both engines run in the same process, each in its
 * own workerd, and take turns in short rounds (A B, B A, ...), so a slow phase of the machine
 * hits both alike; the rounds are paired, and the report is the mean workerd CPU per cycle of
 * each and in how many pairs this tree was cheaper. Prints JSON to stdout.
 *
 * Flags: --against DIR (required: a checkout with its own node_modules or a link to ours)
 *        --clients N (32) --episodes N (256) --rounds N (10) --round S (6) --warmup S (4)
 *        --fresh K: new workerd processes and engines for both sides every K rounds (default:
 *        one pair for the whole run). Two runs of identical trees have differed by 0.1-0.2 ms
 *        per cycle with one pair of processes, a bias that stays with the processes; with
 *        fresh pairs it averages out instead of deciding the verdict.
 *        --ops N: instead of the load, each round times every operation alone, N requests one
 *        at a time (bench/profile.ts), and the report is per operation. Finer than the load:
 *        its paired standard error is 0.02-0.04 ms per request here (one run resolves about
 *        0.05 ms), against about 0.1 ms per cycle for 16 rounds of load.
 *        --tmpdir DIR: where Miniflare keeps both sides' state (default /dev/shm; /tmp puts
 *        it on disk, where every commit is fsynced, as with `npm start`'s .local/state).
 */
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { REPO_ROOT } from "../scripts/local/exchange";
import { parseFlags } from "./flags";
import { Http } from "./load/http";
import { prepareEngine, runLoad } from "./loadgen";
import { profileTarget } from "./profile";
import { serveEngine, type EngineAccess } from "./serve/exchange";
import type { Served } from "./serve/served";
import { mean, paired, stateInMemory } from "./stats";

const flags = parseFlags(process.argv.slice(2));
const num = (k: string, d: number): number => Number(flags.get(k) ?? d);
const log = (line: string): void => void process.stderr.write(`[bench:ab] ${line}\n`);

type Side = Served & EngineAccess & { side: string };

async function startSide(name: string, dir: string, episodes: number): Promise<Side> {
  const side = { ...(await serveEngine({ prefix: "ab", checkout: dir })), side: name };
  if (episodes > 0) {
    const http = new Http(side.baseUrl, 40);
    await prepareEngine(http, side.trainerToken, episodes).finally(() => http.close());
  }
  log(`${name}: ${dir}, ${side.url}, workerd pid(s) ${side.pids.join(",")}`);
  return side;
}

async function main(): Promise<void> {
  const against = flags.get("against");
  if (!against || !existsSync(join(against, "wrangler.toml"))) throw new Error("--against DIR: a checkout of the exchange (with wrangler.toml) to compare this tree with");
  // As npm run bench: Miniflare's state really in memory, unless --tmpdir says where (/tmp: on disk, fsynced at every commit).
  stateInMemory(flags.get("tmpdir"));
  const clients = num("clients", 32);
  const episodes = num("episodes", 256);
  const rounds = num("rounds", 10);
  const roundS = num("round", 6);
  const warmupS = num("warmup", 4);
  const fresh = Math.max(1, Math.floor(num("fresh", rounds)));
  const opsFlag = Number(flags.get("ops"));
  const opsN = flags.has("ops") ? (Number.isFinite(opsFlag) ? Math.max(10, opsFlag) : 500) : null;
  /** Per operation (--ops): workerd CPU per request, round by round, of each side. */
  const ops = new Map<string, { this: number[]; against: number[] }>();
  const cpu = new Map<string, number[]>([["this", []], ["against", []]]);
  const cps = new Map<string, number[]>([["this", []], ["against", []]]);
  for (let first = 0; first < rounds; first += fresh) {
    // Which side starts first alternates too, in case the order of process start matters.
    const starts: [string, string][] = [["this", REPO_ROOT], ["against", resolve(against)]];
    if ((first / fresh) % 2 === 1) starts.reverse();
    const sides: Side[] = [];
    try {
      for (const [name, dir] of starts) sides.push(await startSide(name, dir, opsN === null ? episodes : 0));
      sides.sort((a, b) => (a.side === "this" ? -1 : b.side === "this" ? 1 : 0));
      for (let i = first; i < Math.min(rounds, first + fresh); i++) {
        for (const s of i % 2 === 0 ? sides : [...sides].reverse()) {
          if (opsN !== null) {
            const side = s.side as "this" | "against";
            const timed = await profileTarget({ ...s, origin: s.url, floorPath: "/health", rpcPath: "/get_engine_status", pids: s.pids, n: opsN });
            for (const o of timed) {
              if (o.server_cpu_ms_per_req === null) throw new Error("no workerd CPU figure: is /proc readable?");
              let row = ops.get(o.op);
              if (row === undefined) ops.set(o.op, (row = { this: [], against: [] }));
              row[side].push(o.server_cpu_ms_per_req);
            }
            log(`round ${i + 1}/${rounds} ${s.side.padEnd(7)} ${timed.map((o) => `${o.op} ${o.server_cpu_ms_per_req}`).join(", ")} ms`);
            continue;
          }
          const r = await runLoad({ ...s, clients, episodes, durationSec: roundS, warmupSec: i === first ? warmupS : 2, setup: false, serverPids: s.pids });
          if (r.server_cpu_ms_per_cycle === null) throw new Error("no workerd CPU figure: is /proc readable?");
          if (r.errors > 0) throw new Error(`${s.side}: ${r.errors} errors, e.g. ${r.error_samples[0] ?? "?"}`);
          cpu.get(s.side)!.push(r.server_cpu_ms_per_cycle);
          cps.get(s.side)!.push(r.cycles_per_s);
          log(`round ${i + 1}/${rounds} ${s.side.padEnd(7)} ${r.cycles_per_s} cycles/s, ${r.server_cpu_ms_per_cycle} ms workerd CPU per cycle, others ${r.other_cpu_pct}% of a core`);
        }
      }
    } finally {
      for (const s of sides) await s.stop();
    }
  }
  if (opsN !== null) {
    const perOp = Object.fromEntries([...ops].map(([op, r]) => [op, paired(r.this, r.against)]));
    console.log(JSON.stringify({ ops: opsN, rounds, fresh_processes_every: fresh, against: resolve(against), workerd_cpu_ms_per_request: perOp }, null, 2));
    for (const [op, p] of Object.entries(perOp)) log(`${op.padEnd(20)} this ${p.this} ms, against ${p.against} ms: ${p.diff} +- ${p.se}, this cheaper in ${p.this_cheaper_in} of ${rounds}`);
    return;
  }
  const a = cpu.get("this")!;
  const b = cpu.get("against")!;
  const report = {
    load: `${clients}x${episodes}`,
    rounds,
    round_s: roundS,
    fresh_processes_every: fresh,
    against: resolve(against),
    cpu_ms_per_cycle: { this: mean(a), against: mean(b) },
    cycles_per_s: { this: mean(cps.get("this")!), against: mean(cps.get("against")!) },
    this_cheaper_in_rounds: a.filter((x, i) => x < b[i]!).length,
    /** This minus against, round by round, with its standard error. */
    difference_ms: (({ diff, se }) => ({ mean: diff, se }))(paired(a, b)),
    per_round_cpu_ms: { this: a, against: b },
  };
  console.log(JSON.stringify(report, null, 2));
  log(`workerd CPU per cycle: this ${report.cpu_ms_per_cycle.this} ms, against ${report.cpu_ms_per_cycle.against} ms; this cheaper in ${report.this_cheaper_in_rounds} of ${rounds} rounds`);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
