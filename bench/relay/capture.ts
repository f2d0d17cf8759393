/**
 * What the ledger's capture adds to a relayed call (`npm run bench:relay -- --capture-compare
 * off,tokens`): the same 64 claims make streamed calls through the exchange in rounds, each
 * round under one capture mode set on the engine just before it, the modes taking turns in an
 * order that rotates from round to round, with a round of direct calls in each turn as the
 * baseline. Then the ledger is read back, claim by claim, to show that the calls made with
 * capture on were recorded (and with `tokens`, with their token ids), so the figures are not
 * those of a capture that did nothing.
 */
import type { CaptureMode } from "../../src/protocol/ledger";
import type { LedgerClient } from "../../src/client";
import { cpuMeter, mean, paired, summarize, type Latency } from "../stats";

export type CaptureCompareInput<T> = {
  modes: CaptureMode[];
  direct: T[];
  relayed: T[];
  /** The claims' episodes, in the order of `relayed`. */
  episodes: string[];
  rounds: number;
  calls: number;
  /** One round: every target makes `calls` streamed calls; the time of each call, ms. */
  round(targets: T[], calls: number): Promise<number[]>;
  ledger: LedgerClient;
  /** The processes whose CPU a relayed call costs, by name (workerd's, the agent's). */
  pids: Record<string, number[]>;
  log(line: string): void;
};

export type CaptureCompareResult = {
  modes: CaptureMode[];
  rounds: number;
  direct: Latency;
  /** Per mode: the relayed calls' times, and what they add to the direct calls' (p50, p99, mean). */
  relayed: Record<string, Latency & { added: { p50: number; p99: number; mean: number } }>;
  /** The second mode's relayed p50 and p99 minus the first's (e.g. tokens minus off). */
  difference: { of: string; p50: number; p99: number };
  /** Per mode, round by round: relayed p50 minus the same turn's direct p50. */
  added_p50_by_round: Record<string, number[]>;
  /** The second mode's added p50 minus the first's, paired round by round: mean, its standard error, median. */
  difference_by_round: { mean: number; se: number; median: number };
  /** Per mode: each process's CPU per relayed call, ms (mean of the rounds), less noisy than latency on a busy machine. */
  cpu_ms_per_call: Record<string, Record<string, number>>;
  /** What the ledger holds of these claims once the agent has shipped its records. */
  recorded: { calls_made_with_capture_on: number; calls: number; calls_with_tokens: number; calls_made_with_tokens: number };
};

const r2 = (x: number): number => Math.round(x * 100) / 100;

/** Every claim's trajectory read back, until the recorded counts stop growing (the agent ships about every second). */
async function readBack(ledger: LedgerClient, episodes: string[], log: (l: string) => void): Promise<{ calls: number; withTokens: number }> {
  let last = { calls: -1, withTokens: -1 };
  for (let attempt = 0; attempt < 30; attempt++) {
    const now = { calls: 0, withTokens: 0 };
    for (const ep of episodes) {
      const t = await ledger.trajectory(ep).catch(() => null);
      if (t === null) continue;
      now.calls += t.calls.length;
      now.withTokens += t.calls.filter((c) => c.tokens !== null).length;
    }
    log(`ledger read back: ${now.calls} calls recorded, ${now.withTokens} with token ids`);
    if (now.calls === last.calls && now.withTokens === last.withTokens) return now;
    last = now;
    await new Promise((r) => setTimeout(r, 2000));
  }
  return last;
}

export async function compareCapture<T>(o: CaptureCompareInput<T>): Promise<CaptureCompareResult> {
  const direct: number[] = [];
  const relayed = new Map<CaptureMode, number[]>(o.modes.map((m) => [m, []]));
  const byRound = new Map<CaptureMode, number[]>(o.modes.map((m) => [m, []]));
  const cpu = new Map<CaptureMode, Record<string, number[]>>(o.modes.map((m) => [m, Object.fromEntries(Object.keys(o.pids).map((k) => [k, []]))]));
  let madeOn = 0;
  let madeTokens = 0;
  const setCapture = async (m: CaptureMode) => {
    const c = await o.ledger.configure({ capture: m });
    if (c.capture !== m) throw new Error(`the engine's capture is ${c.capture}, not ${m}`);
  };
  // Warm-up under every mode: the first calls of a claim under capture carry its whole history.
  await o.round(o.direct, 3);
  for (const m of o.modes) {
    await setCapture(m);
    await o.round(o.relayed, 3);
    if (m !== "off") madeOn += 3 * o.relayed.length;
    if (m === "tokens") madeTokens += 3 * o.relayed.length;
  }
  for (let k = 0; k < o.rounds; k++) {
    // The modes' order rotates, so no mode always follows the direct round or another mode.
    const order = o.modes.map((_, i) => o.modes[(i + k) % o.modes.length] as CaptureMode);
    const d = await o.round(o.direct, o.calls);
    direct.push(...d);
    const dp50 = summarize(d).p50;
    const line: string[] = [`direct p50 ${dp50}`];
    for (const m of order) {
      await setCapture(m);
      const meters = Object.entries(o.pids).map(([name, pids]) => [name, cpuMeter(pids)] as const);
      for (const [, meter] of meters) meter.start();
      const xs = await o.round(o.relayed, o.calls);
      for (const [name, meter] of meters) {
        const use = meter.stop();
        if (use.server_cpu_pct !== null) cpu.get(m)![name]!.push((use.server_cpu_pct * 10 * use.wall_s) / xs.length);
      }
      relayed.get(m)!.push(...xs);
      const p50 = summarize(xs).p50;
      byRound.get(m)!.push(r2(p50 - dp50));
      if (m !== "off") madeOn += xs.length;
      if (m === "tokens") madeTokens += xs.length;
      line.push(`${m} p50 ${p50} (+${r2(p50 - dp50)})`);
    }
    o.log(`capture round ${k + 1}/${o.rounds}: ${line.join(", ")} ms`);
  }
  await setCapture("off");
  const dl = summarize(direct);
  const out: CaptureCompareResult["relayed"] = {};
  for (const [m, xs] of relayed) {
    const l = summarize(xs);
    out[m] = { ...l, added: { p50: r2(l.p50 - dl.p50), p99: r2(l.p99 - dl.p99), mean: r2(l.mean - dl.mean) } };
  }
  const [a, b] = o.modes as [CaptureMode, CaptureMode];
  const pairs = paired(byRound.get(b)!, byRound.get(a)!);
  const diffs = byRound.get(b)!.map((x, i) => x - byRound.get(a)![i]!);
  const got = await readBack(o.ledger, o.episodes, o.log);
  return {
    modes: o.modes,
    rounds: o.rounds,
    direct: dl,
    relayed: out,
    difference: { of: `${b} minus ${a}`, p50: r2(out[b]!.p50 - out[a]!.p50), p99: r2(out[b]!.p99 - out[a]!.p99) },
    added_p50_by_round: Object.fromEntries(byRound),
    difference_by_round: { mean: pairs.diff, se: pairs.se, median: summarize(diffs).p50 },
    cpu_ms_per_call: Object.fromEntries([...cpu].map(([m, per]) => [m, Object.fromEntries(Object.entries(per).map(([k, xs]) => [k, mean(xs)]))])),
    recorded: { calls_made_with_capture_on: madeOn, calls: got.calls, calls_with_tokens: got.withTokens, calls_made_with_tokens: madeTokens },
  };
}
