/**
 * An export page's stored call bodies are loaded a run of claims at a time, at most
 * EXPORT_LOAD_BYTES of them (src/ledger/export.ts): a page of 200 long agents' claims holds
 * hundreds of megabytes of deltas, past an isolate's 128 MB. Cut into runs, the export is the same
 * text, byte for byte, whatever the runs: claims whose calls share batch objects, claims without
 * calls, and a run boundary in the middle of the page.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { EXPORT_LOAD_BYTES, exportTrajectories } from "../src/ledger/export";
import { batchOf, callRecord, postCalls } from "./support/ledger";
import { threeTurns } from "./support/ledger-calls";
import { createEngine } from "./support/harness";

const text = async (stream: ReadableStream<Uint8Array>): Promise<string> => new Response(stream).text();

describe("the export's runs of claims", () => {
  it("writes the same export whether a page is loaded at once or a claim at a time", async () => {
    const e = await createEngine("export-runs");
    const claims = Array.from({ length: 9 }, (_, i) => ({ episode: `ep-${i}`, fence: 1 + (i % 2), client: `c-${i}` }));
    // Ended claims, as the engine's outbox writes them; ep-3 and ep-7 called no model.
    for (const [i, c] of claims.entries()) {
      await env.DB.prepare(
        `INSERT INTO trajectories (engine, episode_uuid, fence, client_uuid, task_id, episode_type, global_step, run, reward, is_success, workflow_output, ended_at)
         VALUES (?, ?, ?, ?, 't', 'train', 1, 1, ?, 1, '{"reward":0}', ?)`,
      )
        .bind(e.name, c.episode, c.fence, c.client, i / 10, 1000 + i)
        .run();
    }
    // Three claims' calls a batch: each batch object holds calls of several claims.
    const called = claims.filter((_, i) => i !== 3 && i !== 7);
    for (let i = 0; i < called.length; i += 3) {
      const batch = called.slice(i, i + 3).flatMap((c) => threeTurns(c, callRecord));
      expect((await postCalls(e, batchOf(batch, `batch-runs-${i}`))).status).toBe(200);
    }
    const exported = async (loadBytes: number) => {
      const r = await exportTrajectories(env.DB, env.LEDGER, e.name, {}, undefined, "whole", async () => null, loadBytes);
      if ("ok" in r) throw new Error(r.detail);
      return text(r.stream);
    };
    const atOnce = await exported(EXPORT_LOAD_BYTES);
    expect(atOnce.trim().split("\n")).toHaveLength(9);
    expect(atOnce).toContain('"episode_uuid":"ep-8"');
    // A byte per run: each claim with calls a run of its own, those without joining the next.
    expect(await exported(1)).toBe(atOnce);
    // Runs of a few claims, their boundaries inside batch objects.
    const oneClaim = atOnce.length / 9;
    expect(await exported(Math.round(oneClaim))).toBe(atOnce);
  });
});
