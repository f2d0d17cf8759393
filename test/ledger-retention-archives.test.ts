/**
 * Retention beside a delete that keeps the history (keep_history):
 *
 * - The alarm's sweep deletes the engine's rows past retention, then the R2 days before the
 *   cutoff's. A delete that re-filed the rows under the archive's name while the sweep's row
 *   delete was on its way left the sweep deleting those rows' day objects: the archive kept rows
 *   whose bodies were gone. The sweep now stops before any day goes once a delete began.
 * - An archive found its bodies' prefix only from one of its calls: an idle engine whose rows
 *   retention had taken, its cutoff day's objects still there, made an archive with none, and
 *   deleting the archive left those objects for ever. The engine's object now gives the prefix
 *   as it is deleted.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import type { EngineObject } from "../src/engine/engine-object";
import { admin, ADMIN_TOKEN, createEngine, ORIGIN, raw, rollingWith, withGateway, workerFetch, type TestEngine } from "./support/harness";
import { DAY, engineWithRowRetainedObject, HOUR, ledgerKeys, recordOne } from "./support/ledger-retention";
import { LedgerClient } from "../src/client";

/** The engine's D1 with its ledger sweep's DELETEs held at a gate until released. */
async function gateLedgerSweep(e: TestEngine): Promise<{ reached: () => boolean; release: () => void }> {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let reached = false;
  await runInDurableObject(e.stub, (instance: EngineObject) => {
    const self = instance as unknown as { env: { DB: D1Database } };
    const real = self.env.DB;
    const wrapped = {
      prepare: (q: string) => {
        const stmt = real.prepare(q);
        if (!q.startsWith("DELETE FROM llm_calls")) return stmt;
        return {
          bind: (...args: unknown[]) => ({
            run: async () => {
              reached = true;
              await gate;
              return stmt.bind(...args).run();
            },
          }),
        };
      },
      batch: (s: D1PreparedStatement[]) => real.batch(s),
    } as unknown as D1Database;
    self.env = { ...self.env, DB: wrapped };
  });
  return { reached: () => reached, release };
}

describe("retention and the histories a delete keeps", () => {
  it("keeps the bodies of calls a keep_history delete re-filed while the retention sweep waited on D1", async () => {
    const e = await createEngine("ret-refile");
    // The engine's clock three days ahead of the Worker's real one (which names the bodies' days):
    // with retention_days 1, the sweep's cutoff is past the call and its object's day.
    e.clock.t = Date.now() + 3 * DAY;
    await rollingWith(e, 1);
    await new LedgerClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens.operator, fetch: workerFetch }).configure({ retention_days: 1 });
    await withGateway(e);
    await recordOne(e, "c1", Date.now() - 10_000);
    expect(await ledgerKeys(e.name)).toHaveLength(1);

    const { reached, release } = await gateLedgerSweep(e);
    e.clock.t += HOUR + 1000;
    const alarm = runDurableObjectAlarm(e.stub);
    await vi.waitFor(() => expect(reached()).toBe(true)); // the sweep's DELETE of old rows is on its way to D1
    // The operator deletes the engine, keeping its history.
    const del = await raw(`/admin/engines/${e.name}?keep_history=true&force=true`, { method: "DELETE", token: ADMIN_TOKEN });
    expect(del.status, del.text).toBe(200);
    const archived = await env.DB.prepare("SELECT body_key FROM llm_calls WHERE engine LIKE ?").bind(`${e.name}@%`).all<{ body_key: string }>();
    expect(archived.results).toHaveLength(1);
    // Kept with the archive, body and row, before the held sweep goes on.
    expect(await env.LEDGER.head(archived.results[0]!.body_key)).not.toBeNull();
    release();
    await alarm;

    const kept = await env.DB.prepare("SELECT body_key FROM llm_calls WHERE engine LIKE ?").bind(`${e.name}@%`).all<{ body_key: string }>();
    expect(kept.results).toHaveLength(1);
    // The archive's row must still point to a body that exists.
    expect(await env.LEDGER.head(kept.results[0]!.body_key), "the archived call's body was deleted by the sweep").not.toBeNull();
  });

  it("deletes an archive's bodies when retention had removed all its calls' rows before the delete", async () => {
    // An idle engine whose call's row retention removed, its object left until its day is past the cutoff.
    const { e } = await engineWithRowRetainedObject("ret-archive");

    const archive = (await admin.deleteEngine(e.name, { keep_history: true, force: true })).history_kept_as!;
    expect(archive).toMatch(/@\d+$/);
    const r = await admin.deleteArchive(archive);
    expect(r.done).toBe(true);
    expect((await admin.archives({ after: `${e.name}@0` })).archives.find((a) => a.name === archive)).toBeUndefined();
    // Nothing of the engine is left anywhere: no engine, no archive. Its incarnation's bodies must be gone too.
    expect(await ledgerKeys(e.name), "the incarnation's R2 objects outlive the engine and its archive").toEqual([]);
  });
});
