/**
 * An engine from before the buffer's D1 rows were swept noted its buffer's use only at its next
 * stored step: one that had used its buffer and stored no step since never swept the rows it had
 * written to D1, which every engine shares. Engine migration 30 reads its uses from what it holds
 * and sets a sweep, which the alarm, set again after the upgrade, runs.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { EngineObject } from "../src/engine/engine-object";
import { SWEEP_EVERY_MS } from "../src/engine/retention-schedule";
import { stepRow as step } from "./support/buffer";
import { advance, createEngine, reconnect } from "./support/harness";
import { rewindSchema } from "./support/schema-rewind";

const DAY_MS = 86_400_000;
const stepCount = async (engine: string) => (await env.DB.prepare("SELECT COUNT(*) AS n FROM buffer_steps WHERE engine = ?").bind(engine).first<{ n: number }>())?.n;

describe("an engine upgraded from before the buffer's D1 rows were swept", () => {
  it("sweeps the step rows it wrote to D1 before the upgrade once they pass d1_retention_days, without a new step", async () => {
    const e = await createEngine("upret");
    await e.as("trainer").startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
    await e.as("client").postSteps({ steps: [step("s1", "g1", 0, true)] });
    expect((await e.as("trainer").getRolloutData()).success).toBe(true);
    await advance(e, 5_000);
    expect(await stepCount(e.name)).toBe(1);
    // What such an engine held: no note of its uses, no sweep set (it never used the ledger).
    await runInDurableObject(e.stub, async (_i: EngineObject, state) => {
      rewindSchema(state.storage.sql, 29);
      state.storage.sql.exec("DELETE FROM kv WHERE k IN ('retention_uses', 'ledger_sweep_at')");
      await state.storage.deleteAlarm();
    });
    await expect(runInDurableObject(e.stub, (_i, state) => state.abort("deploy"))).rejects.toThrow();
    await reconnect(e);
    await advance(e, 31 * DAY_MS);
    await advance(e, SWEEP_EVERY_MS);
    expect(await stepCount(e.name)).toBe(0);
  });
});
