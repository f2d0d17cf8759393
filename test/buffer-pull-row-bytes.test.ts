/**
 * A pull's kept row (buf_pulls) holds its group ids twice, in `group_ids` and in each group's
 * report: with ids clients chose long and escaped (256 characters, 6 bytes each as JSON), 1000
 * groups made a row of 3.2 MB, past the 2,000,000 bytes a Durable Object's row holds. Miniflare
 * does not enforce that; deployed, every such pull's INSERT would fail. A pull hands out what its
 * row holds, and the next pull the rest.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { DO_MAX_ROW_BYTES } from "../src/protocol/limits";
import { createEngine, raw } from "./support/harness";

describe("a pull's kept row", () => {
  it("stays within a Durable Object row's 2,000,000 bytes when clients name groups with long escaped ids; the next pull hands out the rest", async () => {
    const e = await createEngine("pullrow");
    await e.as("trainer").startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
    // 1000 groups of one completed session each; each id is 256 units that JSON escapes to 6 bytes.
    const steps = Array.from({ length: 1000 }, (_, i) => ({
      session_id: `s-${i}`,
      group_id: `${String(i).padStart(4, "0")}${"\u0001".repeat(252)}`,
      step_index: 0,
      messages: [{ role: "user", content: "q" }],
      response: "a",
      reward: 1,
      is_session_completed: true,
    }));
    const posted = await raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify({ steps }) });
    expect(posted.status).toBe(200);

    const pull = async () => {
      const res = await raw(`/e/${e.name}/get_rollout_data`, { token: e.tokens.trainer, body: JSON.stringify({ max_groups: 1000 }) });
      expect(res.status).toBe(200);
      return (res.json as { data: { meta_info: { finished_groups: string[] } } }).data.meta_info.finished_groups;
    };
    const first = await pull();
    const second = await pull();
    expect(first.length).toBeGreaterThan(400);
    expect(first.length).toBeLessThan(1000);
    expect(new Set([...first, ...second])).toEqual(new Set(steps.map((s) => s.group_id)));

    const rowBytes = await runInDurableObject(e.stub, (_i, state) =>
      state.storage.sql
        .exec<{ b: number | null }>("SELECT MAX(octet_length(group_ids) + COALESCE(octet_length(report), 0) + 16) AS b FROM buf_pulls")
        .one().b,
    );
    expect(rowBytes).not.toBeNull();
    expect(rowBytes!).toBeLessThanOrEqual(DO_MAX_ROW_BYTES);
  }, 30_000);
});
