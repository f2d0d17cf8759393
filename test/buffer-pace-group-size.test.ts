/**
 * Pace with groups of several sessions posted as they come: a worker's batch opens a group with
 * its first session's row, and the group's later sessions join a group begun, which pace always
 * takes. So an opening group weighs as the group_size sessions it will bring, and a pending
 * group as at least that many (buffer-pace.ts): weighed by the rows in hand, each group pace let
 * begin brought group_size - 1 rollouts it never counted, and was consumed past max_staleness
 * (docs/buffer.md, "Pacing instead of discarding": the bound holds for all work that keeps
 * sending rows).
 */
import { describe, expect, it } from "vitest";
import { stepRow as row, type Row } from "./support/buffer";
import { createEngine, raw, type TestEngine } from "./support/harness";

// Rows name no weight_version: each takes the engine's version when it arrives (docs/buffer.md), so a
// batch pace refused and that is sent again later counts from the version it was finally taken at.
const post = (e: TestEngine, rows: Row[]) => raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify({ steps: rows }) });

describe("pace with workers posting each session's rows as they come (group_size > 1)", () => {
  it("never lets a group it admitted be consumed more than max_staleness versions late", async () => {
    const e = await createEngine("pace-gs");
    const trainer = e.as("trainer");
    await trainer.startRollout({ num_repeat_per_sample: 2, job_session: "job-1" });
    // The trainer takes 2 rollouts (one group of 2) per version; at most 1 version late.
    expect((await raw(`/e/${e.name}/buffer/config`, { token: e.tokens.operator, body: JSON.stringify({ staleness_policy: "pace", max_staleness: 1, rollouts_per_version: 2 }) })).status).toBe(200);
    let version = 0;
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: version });

    // Four prompts, two samples each (GRPO): each sample's worker posts its first step when it has it.
    // The first sample's row opens the group (paced); the second's joins a group begun (always taken).
    const groups = ["g1", "g2", "g3", "g4"];
    const waiting = new Set(groups);
    const openStatus: Record<string, number> = {};
    const begun: string[] = [];
    const tryOpen = async () => {
      for (const g of groups) {
        if (!waiting.has(g)) continue;
        const opened = await post(e, [row(`${g}-a`, g, 0, false)]);
        openStatus[g] = opened.status;
        if (opened.status === 503) {
          expect(opened.json).toMatchObject({ error: "paced" });
          continue;
        }
        expect(opened.status).toBe(200);
        waiting.delete(g);
        begun.push(g);
      }
      // Then the second samples' rows come, and both samples finish: rows of groups already begun, always taken.
      for (const g of begun.splice(0)) {
        expect((await post(e, [row(`${g}-b`, g, 0, true), row(`${g}-a`, g, 1, true)])).status).toBe(200);
      }
    };
    await tryOpen();
    const firstRound = { ...openStatus };

    // The trainer takes one group (its 2 rollouts) per version, then moves on; refused groups are sent again.
    const lags: { group: string; lag: number | null; consumer: number | null }[] = [];
    for (let round = 0; round < 12 && (waiting.size > 0 || lags.length < groups.length); round++) {
      const pulled = await trainer.getRolloutData({ max_groups: 1 });
      for (const g of pulled.data.meta_info.groups) lags.push({ group: g.group_id, lag: g.lag_versions, consumer: pulled.data.meta_info.consumer_weight_version });
      // It moves on once it trained on its batch; with nothing to train on, its version stays.
      if (pulled.success) {
        version++;
        await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: version });
      }
      await tryOpen();
    }
    expect(lags.map((l) => l.group).sort()).toEqual(groups);
    // Pace's promise: every rollout it let begin is consumed within max_staleness (1) versions.
    const late = lags.filter((l) => l.lag === null || l.lag > 1);
    expect(late, `first round of opening batches answered ${JSON.stringify(firstRound)}`).toEqual([]);
  });
});
