/**
 * The rollout buffer's benchmark workloads, through the typed client (src/client) against a
 * real engine: step ingestion in batches of 100 from concurrent posters, and the cost of
 * get_rollout_data with many pending (incomplete) groups.
 */
import type { z } from "zod";
import type { EngineClient } from "../../src/client";
import type { StepRow } from "../../src/protocol/buffer";
import { inParallel } from "../load/closed-loop";
import { summarize, type Latency } from "../stats";

/** A row as a client sends it (defaults optional). */
type Step = z.input<typeof StepRow>;

const PROMPT = [{ role: "system", content: "You are a careful agent." }, { role: "user", content: "Solve the task and report the answer. ".repeat(4) }];

function step(group: string, session: string, index: number, completed: boolean, reward = 0): Step {
  return { session_id: session, group_id: group, step_index: index, messages: PROMPT, response: "Thinking about it... the answer is 42.", reward, is_session_completed: completed, weight_version: 1 };
}

/**
 * One batch of 100 rows that completes one group: 4 sessions of 25 steps, the last step of
 * each session completed. Keyed by poster and batch so no two batches collide.
 */
export function completingBatch(tag: string, groupSize: number, rows = 100): Step[] {
  const perSession = Math.floor(rows / groupSize);
  const out: Step[] = [];
  for (let s = 0; s < groupSize; s++) for (let i = 0; i < perSession; i++) out.push(step(tag, `${tag}-s${s}`, i, i === perSession - 1, i === perSession - 1 ? s : 0));
  return out;
}

export type IngestResult = { posters: number; batches: number; rows: number; wall_s: number; rows_per_s: number; batch_ms: Latency; errors: number };

/** `posters` concurrent clients each posting batches of 100 rows until `batches` have been posted in all. */
export async function ingest(client: EngineClient, o: { posters: number; batches: number; groupSize: number; tag: string }): Promise<IngestResult> {
  const times: number[] = [];
  let errors = 0;
  let rows = 0;
  const t0 = performance.now();
  await inParallel(o.batches, o.posters, async (b) => {
    const steps = completingBatch(`${o.tag}-b${b}`, o.groupSize);
    const s = performance.now();
    try {
      const r = await client.postSteps({ steps });
      rows += r.accepted;
    } catch {
      errors++;
    }
    times.push(performance.now() - s);
  });
  const wall = (performance.now() - t0) / 1000;
  return { posters: o.posters, batches: o.batches, rows, wall_s: round(wall), rows_per_s: Math.round(rows / wall), batch_ms: summarize(times), errors };
}

/** `groups` incomplete groups: one session each, one step, never completed (at most 1000 rows per request). */
export async function fillPending(client: EngineClient, groups: number, tag: string): Promise<void> {
  for (let g0 = 0; g0 < groups; g0 += 1000) {
    const steps: Step[] = [];
    for (let g = g0; g < Math.min(groups, g0 + 1000); g++) steps.push(step(`${tag}-p${g}`, `${tag}-p${g}-s0`, 0, false));
    await client.postSteps({ steps });
  }
}

/** One timed pull with one group ready (posted just before, untimed), and one timed pull with nothing ready. */
export async function timePulls(client: EngineClient, groupSize: number, tag: string, i: number): Promise<{ ready: number; empty: number }> {
  await client.postSteps({ steps: completingBatch(`${tag}-r${i}`, groupSize, groupSize * 2) });
  let t = performance.now();
  const got = await client.getRolloutData({ max_groups: 1 });
  const ready = performance.now() - t;
  if (!got.success || got.data.meta_info.finished_groups.length !== 1) throw new Error(`expected one ready group, got ${JSON.stringify(got.data.meta_info)}`);
  t = performance.now();
  const none = await client.getRolloutData({ max_groups: 1 });
  const empty = performance.now() - t;
  if (none.success) throw new Error("expected nothing ready");
  return { ready, empty };
}

export const round = (x: number, d = 2): number => Math.round(x * 10 ** d) / 10 ** d;
