/**
 * npm run bench:ledger-long [-- --turns 100,200,300,400] [-- --new-ids N] [-- --completion-ids N] [-- --isolate-mb MB] [-- --read trajectory|turns|sequence] [-- --claims N] [-- --out FILE.json]
 *
 * What reading one long claim's trajectory costs the exchange's memory: for each number of turns,
 * a fresh local exchange (Miniflare) records one claim of that many calls with capture `tokens`
 * (each call adds N prompt ids and a completion to the one before, as an agent's tool loop does:
 * ./workload.ts), then reads its trajectory whole, sampling workerd's resident memory every 20 ms.
 * The answer itself grows with the square of the turns (every call carries its whole prompt), and
 * the exchange streams it call by call; what it holds while it does should grow with the turns
 * only. An isolate on Cloudflare has 128 MB: workerd's V8 heap is held to `--isolate-mb` (128;
 * 0 for no limit) through Miniflare's MINIFLARE_WORKERD_V8_FLAGS, so a read that would not fit
 * there crashes here too, and is reported as failed. `--read turns` reads the claim instead as
 * the rollout buffer gives it turn by turn (get_rollout_data with `training: "turns"`: each
 * call's whole prompt and completion, as quadratic as the trajectory); `--read sequence` pulls
 * it as the one training sequence (linear in the claim), and `--claims N` pulls N such claims of
 * one group at once (a trainer's pull of long agents). Prints one JSON document; --out writes it
 * and FILE.svg, the peak per number of turns (beside an earlier run's: --before FILE.json NAME).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import type { CallRecord } from "../../src/protocol/ledger";
import { createEngine, serveExchange } from "../serve/exchange";
import { renderLongClaimChart, type LongClaimPoint } from "./long-claim-chart";
import { claimCalls } from "./workload";

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const TURNS = (arg("--turns") ?? "100,200,300,400").split(",").map(Number);
const ISOLATE_MB = Number(arg("--isolate-mb") ?? 128);
const NEW_IDS = Number(arg("--new-ids") ?? 400);
const COMPLETION_IDS = Number(arg("--completion-ids") ?? 100);
const READ = arg("--read") ?? "trajectory";
if (READ !== "trajectory" && READ !== "turns" && READ !== "sequence") throw new Error(`--read trajectory, turns or sequence, not ${READ}`);
const PULL = READ !== "trajectory";
/** Claims pulled at once: several counts measure each at the one number of turns given. */
const CLAIM_COUNTS = (arg("--claims") ?? "1").split(",").map(Number);
if (!PULL && CLAIM_COUNTS.some((n) => n !== 1)) throw new Error("--claims is for a pull (--read turns or sequence)");
if (CLAIM_COUNTS.length > 1 && TURNS.length > 1) throw new Error("several --claims counts take one --turns");
const BY_CLAIMS = CLAIM_COUNTS.length > 1;
let CLAIMS = CLAIM_COUNTS[0] ?? 1;
const ADMIN = "bench-ledger-long-admin";
const log = (m: string): void => void process.stderr.write(`[bench:ledger-long] ${m}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const round = (x: number, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

function rssMb(pids: number[]): number {
  let kb = 0;
  for (const pid of pids) {
    try {
      kb += Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0);
    } catch {
      // gone
    }
  }
  return round(kb / 1024);
}

/** The records in batches of at most ~1.2 MB of JSON and 500 calls, as the gateway's shipper sends them. */
function batchesOf(records: CallRecord[]): string[] {
  const out: string[] = [];
  let batch: CallRecord[] = [];
  let bytes = 0;
  const flush = () => {
    if (batch.length > 0) out.push(JSON.stringify({ batch_id: `long-claim-${String(out.length).padStart(4, "0")}`, calls: batch }));
    batch = [];
    bytes = 0;
  };
  for (const r of records) {
    const n = JSON.stringify(r).length;
    if (bytes + n > 1_200_000 || batch.length === 500) flush();
    batch.push(r);
    bytes += n;
  }
  flush();
  return out;
}

/**
 * What is wrong with the answer read, null when nothing: each call's index and its tokens' count,
 * as a trajectory's calls or every pulled item's turns give them; or every item's one sequence,
 * as long as the last call's prompt and completion (each turn extends the one before).
 */
function wrongIn(text: string, records: readonly CallRecord[]): string | null {
  const want = records.map((r, i) => `${i}:${(r.usage?.prompt_tokens ?? 0) + (r.usage?.completion_tokens ?? 0)}`).join();
  if (READ === "trajectory") {
    const answer = JSON.parse(text) as { calls: { call_id: string; tokens: { prompt_ids: number[]; completion_ids: number[] } | null }[] };
    const got = answer.calls.map((k, i) => (k.call_id === records[i]?.call_id ? `${i}:${(k.tokens?.prompt_ids.length ?? -1) + (k.tokens?.completion_ids.length ?? 0)}` : "other call")).join();
    return got === want ? null : "the trajectory is not its calls with their whole prompts";
  }
  const items = (JSON.parse(text) as { data: { data: { tokens?: number[]; turns?: { call_index: number; tokens: number[] }[] }[] } }).data.data;
  if (items.length !== CLAIMS) return `${items.length} items pulled, not ${CLAIMS}`;
  const last = records.at(-1)?.usage;
  for (const item of items) {
    if (READ === "turns" && (item.turns ?? []).map((t) => `${t.call_index}:${t.tokens.length}`).join() !== want) return "an item's turns are not its calls with their whole prompts";
    if (READ === "sequence" && item.tokens?.length !== (last?.prompt_tokens ?? 0) + (last?.completion_tokens ?? 0)) return "an item's sequence is not its whole claim";
  }
  return null;
}

type Point = {
  turns: number;
  claims: number;
  last_prompt_ids: number;
  prompt_ids_in_answer: number;
  answer_mb: number;
  seconds: number;
  /** From the claims' ends until the engine had gathered each one's calls into one object (a pull; null otherwise). */
  gathered_after_seconds: number | null;
  workerd_rss_mb: { start: number; peak: number; peak_minus_start: number } };
type Failed = { turns: number; claims: number; failed: string };

async function measure(turns: number): Promise<Point | Failed> {
  const base = mkdtempSync(join(tmpdir(), "bench-ledger-long-"));
  const ex = await serveExchange({ persistDir: join(base, "state"), adminToken: ADMIN, claimKeySecret: "bench-ledger-long-claim-secret", log: (l) => (/error|fatal|crash/i.test(l) ? log(l) : undefined) });
  try {
    const engine = await createEngine(ex.url, ADMIN, "bench-long");
    const trainer = engine.as("trainer");
    // The claims join one buffer group, to be pulled once ended.
    if (PULL) await trainer.startRollout({ num_repeat_per_sample: CLAIMS, job_session: "bench-long" });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    await trainer.batchRegisterEpisodes({ episodes: Array.from({ length: CLAIMS }, (_, i) => ({ episode_uuid: `long-${i}` })) });
    const shape = { firstPromptTokens: 2_000, newPromptTokens: NEW_IDS, completionTokens: COMPLETION_IDS, answerChars: 200 };
    const auth = { authorization: `Bearer ${engine.trainerToken}` };
    let records: CallRecord[] = [];
    let episode = "";
    const perClaim: CallRecord[][] = [];
    for (let k = 0; k < CLAIMS; k++) {
      const client = `long-client-${k}`;
      const c = await engine.as("client").claimEpisode({ client_uuid: client, discard_episode_timeout: 36_000 });
      if (!c.success || c.fence === undefined) throw new Error(`claim: ${c.fail_cause}`);
      episode = c.episode_uuid;
      records = claimCalls({ episode_uuid: c.episode_uuid, fence: c.fence, client_uuid: client }, turns, shape);
      perClaim.push(records);
    }
    // As one gateway relaying all the claims at once ships them: each batch holds the calls of
    // every claim that finished within it, turn by turn, not one claim's calls alone.
    const interleaved = Array.from({ length: turns }, (_, i) => perClaim.map((r) => r[i] as CallRecord)).flat();
    for (const body of batchesOf(interleaved)) {
      const res = await fetch(`${engine.baseUrl}/agent/calls`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body });
      if (res.status !== 200) throw new Error(`POST agent/calls: ${res.status} ${(await res.text()).slice(0, 300)}`);
      await res.body?.cancel();
    }
    for (let k = 0; PULL && k < CLAIMS; k++) {
      const r = perClaim[k]?.[0];
      const ended = await engine.as("client").endEpisode({ client_uuid: `long-client-${k}`, episode_uuid: r?.episode_uuid ?? "", task_id: "long", workflow_output: { reward: 1, metadata: { task_id: "long" } } });
      if (!ended.success) throw new Error("end_episode did not succeed");
    }
    const lastPrompt = records.at(-1)?.usage?.prompt_tokens ?? 0;
    const promptIds = CLAIMS * records.reduce((n, r) => n + (r.usage?.prompt_tokens ?? 0), 0);
    // The engine gathers each ended claim's calls into one object of its own a few seconds after
    // its end (ledger/compaction.ts): the pull is timed once it has, as a trainer's pull of claims
    // that ended a while ago finds them.
    const gatherStart = performance.now();
    await sleep(1000);
    while (PULL && (await trainer.overview()).ledger.claims_to_gather > 0) await sleep(500);
    const gatherSeconds = round((performance.now() - gatherStart) / 1000, 1);
    const rss: number[] = [];
    const timer = setInterval(() => rss.push(rssMb(ex.pids)), 20);
    rss.push(rssMb(ex.pids));
    const t0 = performance.now();
    // A heap past the isolate's limit crashes workerd: the read fails, and that is the figure.
    const res = await (PULL
      ? fetch(`${engine.baseUrl}/get_rollout_data`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: JSON.stringify({ training: READ }) })
      : fetch(`${engine.baseUrl}/trajectories/${episode}`, { headers: auth })
    ).catch((e: unknown) => e as Error);
    if (res instanceof Error || res.status !== 200 || res.body === null) {
      clearInterval(timer);
      const failed = res instanceof Error ? `the read failed (${res.message}): workerd's heap past ${ISOLATE_MB} MB` : `${res.status} ${await res.text()}`;
      log(`${turns} turns, ${CLAIMS} claim(s): ${failed}`);
      return { turns, claims: CLAIMS, failed };
    }
    let bytes = 0;
    // The answer kept to check it is whole once read (its calls and their order).
    const chunks: Uint8Array[] = [];
    // The status line goes before the calls are built: a heap past the limit breaks the stream.
    const reader = res.body.getReader();
    for (;;) {
      const read = await reader.read().catch((e: unknown) => e as Error);
      if (read instanceof Error) {
        clearInterval(timer);
        const failed = `the answer broke off after ${bytes} bytes (${read.message}): workerd's heap past ${ISOLATE_MB} MB`;
        log(`${turns} turns, ${CLAIMS} claim(s): ${failed}`);
        return { turns, claims: CLAIMS, failed };
      }
      if (read.done) break;
      bytes += read.value.byteLength;
      chunks.push(read.value);
    }
    const seconds = (performance.now() - t0) / 1000;
    clearInterval(timer);
    rss.push(rssMb(ex.pids));
    const wrong = wrongIn(Buffer.concat(chunks).toString("utf8"), records);
    if (wrong !== null) throw new Error(`${turns} turns: ${wrong}`);
    const start = rss[0] ?? 0;
    const peak = Math.max(...rss);
    const p: Point = { turns, claims: CLAIMS, last_prompt_ids: lastPrompt, prompt_ids_in_answer: promptIds, answer_mb: round(bytes / 1e6), seconds: round(seconds, 2), gathered_after_seconds: PULL ? gatherSeconds : null, workerd_rss_mb: { start, peak, peak_minus_start: round(peak - start) } };
    log(`${turns} turns, ${CLAIMS} claim(s): ${PULL ? `gathered ${gatherSeconds} s after their ends; ` : ""}${p.answer_mb} MB in ${p.seconds} s (${promptIds.toLocaleString("en")} prompt ids); workerd RSS ${start} -> peak ${peak} MB`);
    return p;
  } finally {
    await ex.stop();
    rmSync(base, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const startedAt = new Date().toISOString();
  if (ISOLATE_MB > 0) process.env["MINIFLARE_WORKERD_V8_FLAGS"] = `--max-old-space-size=${ISOLATE_MB}`;
  const points: (Point | Failed)[] = [];
  if (BY_CLAIMS) {
    for (const n of CLAIM_COUNTS) {
      CLAIMS = n;
      points.push(await measure(TURNS[0] ?? 100));
    }
  } else for (const t of TURNS) points.push(await measure(t));
  const doc = {
    started_at: startedAt,
    machine: { cpus: cpus().length, load_average_1m: round(loadavg()[0] ?? 0, 2), node: process.version },
    shape: { first_prompt_ids: 2_000, new_prompt_ids_per_turn: NEW_IDS, completion_ids: COMPLETION_IDS, capture: "tokens" },
    read: PULL ? `get_rollout_data of the claims of one group, training ${READ}` : "the trajectory, whole",
    isolate_heap_mb: ISOLATE_MB > 0 ? ISOLATE_MB : null,
    points,
  };
  process.stdout.write(`${JSON.stringify(doc, null, 2)}\n`);
  const out = arg("--out");
  if (out) {
    writeFileSync(out, `${JSON.stringify(doc, null, 2)}\n`);
    const svg = out.endsWith(".json") ? out.replace(/\.json$/, ".svg") : `${out}.svg`;
    const before = arg("--before");
    const runs: { name: string; points: LongClaimPoint[] }[] = [{ name: arg("--name") ?? "this tree", points }];
    if (before !== undefined) runs.push({ name: process.argv[process.argv.indexOf("--before") + 2] ?? "before", points: (JSON.parse(readFileSync(before, "utf8")) as { points: LongClaimPoint[] }).points });
    const limit = ISOLATE_MB > 0 ? `V8 heap held to ${ISOLATE_MB} MB` : "no heap limit";
    const shape = `first prompt 2,000 ids, +${NEW_IDS} prompt ids and ${COMPLETION_IDS} completion ids a turn`;
    const title = !PULL
      ? "Reading one long claim's trajectory: workerd's memory at peak"
      : BY_CLAIMS
        ? `Pulling long claims of ${TURNS[0] ?? 100} turns ${READ === "turns" ? "turn by turn" : "as one sequence each"} (get_rollout_data): workerd's memory at peak`
        : `Pulling one long claim ${READ === "turns" ? "turn by turn" : "as one sequence"} (get_rollout_data): workerd's memory at peak`;
    writeFileSync(svg, renderLongClaimChart({ title, summary: `capture tokens; ${shape}; ${limit}`, by: BY_CLAIMS ? "claims" : "turns", runs }));
    log(`chart: ${svg}`);
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`bench:ledger-long failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
