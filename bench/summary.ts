/** The human-readable summary `npm run bench` prints to stderr after its JSON. */
import type { OpProfile } from "./profile";
import type { BenchReport } from "./report";

export function printSummary(r: BenchReport): void {
  const lines: string[] = ["", "cycles/s and claim p50 (engine vs limit reference):"];
  const cols = ["load", "engine", "reference", "ratio", "claim p50 eng", "claim p50 ref", "CPU/cycle eng", "CPU/cycle ref", "errors", "others' CPU"];
  const widths = [9, 7, 9, 6, 13, 13, 13, 13, 7, 11];
  const row = (cells: string[]) => "  " + cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(" ");
  lines.push(row(cols));
  for (const p of r.comparison.per_load) {
    const f = (x: number | null | undefined, suffix = "") => (x === undefined || x === null ? "-" : `${x}${suffix}`);
    lines.push(
      row([
        p.label,
        f(p.engine_cycles_per_s),
        f(p.reference_cycles_per_s),
        f(p.ratio, "x"),
        f(p.engine_claim_p50_ms, " ms"),
        f(p.reference_claim_p50_ms, " ms"),
        f(p.engine_cpu_ms_per_cycle, " ms"),
        f(p.reference_cpu_ms_per_cycle, " ms"),
        `${f(p.engine_errors)}/${f(p.reference_errors)}`,
        `${f(p.engine_other_cpu_pct, "%")}/${f(p.reference_other_cpu_pct, "%")}`,
      ]),
    );
  }
  lines.push("  (cycles/s; CPU/cycle = workerd CPU per cycle; others' CPU = the rest of the machine during each run, % of a core)");
  const q = r.comparison.claim_p50_10k_over_256;
  lines.push(`  claim p50 at 10,000 / at 256: engine ${q.engine ?? "-"}x, reference ${q.reference ?? "-"}x`);
  if (r.pool_info.engine?.length) {
    lines.push("pool info (engine), p50 per call:");
    for (const p of r.pool_info.engine) lines.push(`  ${String(p.registered).padStart(6)} registered, ${String(p.claimed).padStart(4)} claimed: ${p.ms.p50} ms (p99 ${p.ms.p99} ms, ${p.bytes} bytes)`);
  }
  for (const l of r.loads.engine ?? []) {
    lines.push(`  after ${l.label}: ${l.pool_info_after.finished_rows} finished episodes, pool info ${l.pool_info_after.ms.p50} ms (${l.pool_info_after.bytes} bytes)`);
  }
  const pe = r.profile.engine;
  const pr = r.profile.reference;
  if (pe?.length || pr?.length) {
    lines.push("one request at a time: p50 latency / workerd CPU per request (engine | reference):");
    for (const op of (pe ?? pr)!.map((p) => p.op)) {
      const f = (p: OpProfile | undefined) => (p ? `${p.ms.p50} ms / ${p.server_cpu_ms_per_req} ms` : "-");
      lines.push(`  ${op.padEnd(20)} ${f(pe?.find((p) => p.op === op)).padStart(20)} | ${f(pr?.find((p) => p.op === op))}`);
    }
  }
  lines.push("targets:");
  for (const c of r.comparison.checks) lines.push(`  [${c.met === null ? "?" : c.met ? "met" : "MISSED"}] ${c.target}: ${c.value}`);
  process.stderr.write(lines.join("\n") + "\n");
}

