/**
 * The buffer's bulk operations at scale: each binds no list that grows with what the buffer
 * holds (SQLite refuses a value past its string limit, 2 MB on Cloudflare, about 10 MB in
 * workerd here, with SQLITE_TOOBIG, and nothing the request did is kept: a restart or a pull that
 * meets it fails the same way each time it is sent again).
 *
 * - restart_training renames every group dropped since the last restart (kept a week): chosen in
 *   SQL (buffer-outcomes.ts discardForRestart), not bound as their ids.
 * - a pull deletes the steps of its groups' sessions that never completed, of any number: chosen
 *   by the groups (buffer-pulls.ts clearIncompleteSessions), not bound as the sessions' ids.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { createEngine } from "./support/harness";
import { stepRow } from "./support/buffer";

describe("the buffer at scale: restart_training", () => {
  it("discards 42,000 pending groups with 256-character ids and answers the restart", { timeout: 300_000 }, async () => {
    const e = await createEngine("rvb");
    await e.as("trainer").startRollout({ num_repeat_per_sample: 2, job_session: "job-1" });
    await e.as("operator").configureBuffer({ ttl_seconds: 0 });
    const w = e.as("client");
    const long = (i: number) => `${"g".repeat(245)}-${String(i).padStart(10, "0")}`;
    for (let b = 0; b < 42; b++) {
      const steps = Array.from({ length: 1000 }, (_, k) => ({ ...stepRow(`s${b * 1000 + k}`, long(b * 1000 + k), 0, false), messages: [] }));
      expect(await w.postSteps({ steps })).toMatchObject({ accepted: 1000 });
    }
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 42_000 });
    const started = await e.as("trainer").startRollout({ num_repeat_per_sample: 2, job_session: "job-2", restart_training: true });
    expect(started).toMatchObject({ success: true, job_session: "job-2" });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 0, dropped_groups: 42_000 });
  });

  it("renames a group dropped before once, at the first restart after its drop, and a worker's group that only looks discarded too", async () => {
    const e = await createEngine("rvb");
    const trainer = e.as("trainer");
    await trainer.startRollout({ num_repeat_per_sample: 2, job_session: "job-1" });
    await e.as("operator").configureBuffer({ ttl_seconds: 0 });
    const lookalike = "restart_training:not-a-uuid:g";
    for (const g of ["g1", lookalike]) expect(await e.as("client").postSteps({ steps: [stepRow(`s-${g}`, g, 0, false)] })).toMatchObject({ accepted: 1 });
    const names = () => runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec<{ group_id: string }>("SELECT group_id FROM buf_groups ORDER BY group_id").toArray().map((r) => r.group_id));
    await trainer.startRollout({ num_repeat_per_sample: 2, job_session: "job-2", restart_training: true });
    const first = await names();
    expect(first).toHaveLength(2);
    for (const n of first) expect(n).toMatch(/^restart_training:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:(g1|restart_training:not-a-uuid:g)$/);
    // The next restart leaves them as they are.
    await trainer.startRollout({ num_repeat_per_sample: 2, job_session: "job-3", restart_training: true });
    expect(await names()).toEqual(first);
  });
});

describe("the buffer at scale: pulls", () => {
  it("hands out 1000 ready groups whose 40 other sessions each never finished", { timeout: 300_000 }, async () => {
    const e = await createEngine("rvb");
    await e.as("trainer").startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
    await e.as("operator").configureBuffer({ ttl_seconds: 0 });
    const w = e.as("client");
    const sid = (g: number, k: number) => `${"s".repeat(240)}-${String(g).padStart(6, "0")}-${String(k).padStart(6, "0")}`;
    // First the abandoned sessions (the group is pending while they run), 25 groups per batch.
    for (let b = 0; b < 40; b++) {
      const steps = [];
      for (let g = b * 25; g < (b + 1) * 25; g++) for (let k = 1; k <= 40; k++) steps.push({ ...stepRow(sid(g, k), `g${g}`, 0, false), messages: [] });
      expect(await w.postSteps({ steps })).toMatchObject({ accepted: 1000 });
    }
    // Then one session of each group finishes: 1000 ready groups.
    const done = Array.from({ length: 1000 }, (_, g) => ({ ...stepRow(sid(g, 0), `g${g}`, 0, true), messages: [] }));
    expect((await w.postSteps({ steps: done })).groups_ready).toHaveLength(1000);
    const pulled = await e.as("trainer").getRolloutData();
    expect(pulled.success).toBe(true);
    expect(pulled.data.meta_info.finished_groups).toHaveLength(1000);
    expect(pulled.data.data).toHaveLength(1000);
  });
});
