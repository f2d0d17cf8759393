/**
 * An engine's object woken by a new version migrates its schema in its constructor; a migration
 * may give old rows deadlines (18: a queued command's expiry), and on an idle engine nothing else
 * would set the alarm for them: it is set again after an upgrade.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ADVISORY_KEEP_MS } from "../src/engine/command-queue";
import type { EngineObject } from "../src/engine/engine-object";
import { advance, createEngine, engineStats, reconnect } from "./support/harness";
import { rewindSchema } from "./support/schema-rewind";

describe("the alarm after an engine's schema upgrade", () => {
  it("arms the alarm for the clear_sessions expiry that migration 18 gives an idle engine's queued commands when it wakes", async () => {
    const e = await createEngine();
    const made = e.clock.t;
    // An engine from before migration 18: one clear_sessions command queued, never polled (a
    // buffer-only engine), and so no deadline and no alarm.
    await runInDurableObject(e.stub, async (_i: EngineObject, state) => {
      const sql = state.storage.sql;
      rewindSchema(sql, 18);
      sql.exec(
        "INSERT INTO commands (body, created_at, visible_at) VALUES (?, ?, ?)",
        JSON.stringify({ kind: "clear_sessions", session_ids: ["s"], group_ids: ["g"], reason: "incomplete_group_ttl" }),
        made,
        made,
      );
      await state.storage.deleteAlarm();
    });
    // The new code is deployed: the object wakes and migrates (its constructor).
    await expect(runInDurableObject(e.stub, (_i, state) => state.abort("deploy"))).rejects.toThrow();
    await reconnect(e);
    const after = await engineStats(e);
    expect(after.pending_commands).toBe(1);
    // The migration gave the command a deadline: the alarm should be set no later than it.
    expect(after.alarm_at).not.toBeNull();
    expect(after.alarm_at!).toBeLessThanOrEqual(made + ADVISORY_KEEP_MS);
    // A day later the alarm has deleted it.
    await advance(e, ADVISORY_KEEP_MS + 1);
    expect((await engineStats(e)).pending_commands).toBe(0);
  });
});
