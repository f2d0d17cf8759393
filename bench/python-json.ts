/**
 * `npm run bench:python-json`: what keeping a Python client's numbers costs an end_episode.
 *
 * Python writes a reward of 1.0 as `1.0` and a time.time_ns() stamp digit for digit; JSON.parse
 * then JSON.stringify would hand the runner `1` and a rounded stamp. So the Worker scans every
 * end's text for such numbers and, when there are any, parses it a second time with the source
 * of each number (http/python-json.ts exactNumbers). This times that, per end, against the
 * plain parse every end gets anyway, on bodies shaped like AgentJet's: small ones (the common
 * case, a reward and a few metrics), a long text output, and an output of 10,000 floats.
 *
 * It runs in Node's V8 (Node 22 through npm), not workerd's; the work is the Worker's, which
 * scales out, not the engine's Durable Object's. Prints JSON to stdout.
 * Flags: --ms N (time per measurement, 400) --rounds N (5; the median is reported)
 */
import { exactNumbers } from "../src/http/python-json";
import { parseFlags } from "./flags";

const flags = parseFlags(process.argv.slice(2));
const msPer = Number(flags.get("ms") ?? 400);
const rounds = Number(flags.get("rounds") ?? 5);

/** An end body as AgentJet's Python client writes it: `json.dumps` spacing, floats with their `.0`. */
function pythonEnd(workflowOutput: string): string {
  return `{"client_uuid": "${"c".repeat(36)}", "episode_uuid": "${"e".repeat(36)}", "task_id": "t-123", "workflow_output": ${workflowOutput}}`;
}

const metrics = `"log_metrics": {"success_rate": 1.0, "turns": 7.0, "tool_calls": 12.0, "len": 2048.0}`;
const bodies: Record<string, { python: string; plain: string }> = {
  "reward and metrics (0.4 KB)": {
    python: pythonEnd(`{"reward": 1.0, "is_success": true, "metadata": {"task_id": "t-123"}, ${metrics}}`),
    plain: pythonEnd(`{"reward": 0.75, "is_success": true, "metadata": {"task_id": "t-123"}, "log_metrics": {"success_rate": 0.5, "turns": 7, "tool_calls": 12, "len": 2048}}`),
  },
  "long text output (100 KB)": {
    python: pythonEnd(`{"reward": 0.0, "is_success": false, "metadata": {"transcript": ${JSON.stringify("word ".repeat(20_000))}}, ${metrics}}`),
    plain: pythonEnd(`{"reward": 0.25, "is_success": false, "metadata": {"transcript": ${JSON.stringify("word ".repeat(20_000))}}}`),
  },
  "10,000 floats (90 KB)": {
    python: pythonEnd(`{"reward": 1.0, "scores": [${Array.from({ length: 10_000 }, (_, i) => (i % 4 === 0 ? "1.0" : (i / 7).toFixed(4))).join(", ")}]}`),
    plain: pythonEnd(`{"reward": 0.5, "scores": [${Array.from({ length: 10_000 }, (_, i) => (i / 7 + 0.00001).toFixed(5)).join(", ")}]}`),
  },
};

/** Microseconds per call of `f`, the median of `rounds` timed runs of about `msPer` each. */
function usPer(f: () => void): number {
  let n = 1;
  for (let t = performance.now(); performance.now() - t < 50; n *= 2) for (let i = 0; i < n; i++) f();
  const per: number[] = [];
  for (let r = 0; r < rounds; r++) {
    let calls = 0;
    const t = performance.now();
    while (performance.now() - t < msPer) {
      for (let i = 0; i < 64; i++) f();
      calls += 64;
    }
    per.push(((performance.now() - t) * 1000) / calls);
  }
  per.sort((a, b) => a - b);
  return Math.round(per[Math.floor(per.length / 2)]! * 100) / 100;
}

const out = Object.entries(bodies).map(([shape, b]) => {
  if (exactNumbers(b.python, "workflow_output") === null) throw new Error(`${shape}: the Python body should need its numbers kept`);
  if (exactNumbers(b.plain, "workflow_output") !== null) throw new Error(`${shape}: the plain body should need nothing kept`);
  const parse = usPer(() => JSON.parse(b.python));
  const kept = usPer(() => exactNumbers(b.python, "workflow_output"));
  const scanOnly = usPer(() => exactNumbers(b.plain, "workflow_output"));
  return {
    shape,
    bytes: b.python.length,
    parse_us: parse,
    python_numbers_kept_us: kept,
    kept_over_parse: Math.round((kept / parse) * 100) / 100,
    scan_of_plain_body_us: scanOnly,
  };
});
process.stdout.write(JSON.stringify({ node: process.version, v8: process.versions.v8, ends: out }, null, 2) + "\n");
