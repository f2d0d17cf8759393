/**
 * The oracle's 5xx rule, on real answers of the Worker: Atropos's own 500, a full Atropos
 * queue's 503, the buffer's paced 503 and a full store's storage_full are documented answers, and the first is not a refusal (Atropos's handler may have
 * changed things before it raised); any other 5xx, or those two where the document does not
 * list them, breaks the rule. The fuzz run itself seldom reaches them: each takes two requests
 * in one order.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { EngineObject } from "../../src/engine/engine-object";
import { createEngine, ORIGIN, workerFetch } from "../support/harness";
import { ATROPOS_REGISTRATION, atroposGroup } from "./seeds";
import { targets, type Target } from "./arbitraries";
import type { Doc } from "./document";
import { judge } from "./oracle";
import { atroposCall } from "./world";

describe("the fuzz oracle's 5xx rule", () => {
  it("takes Atropos's documented 500 and full queue, and nothing else of the kind", async () => {
    const doc = (await (await workerFetch(`${ORIGIN}/openapi.json`)).json()) as Doc;
    const byKey = new Map(targets(doc).map((t) => [t.key, t]));
    const target = (key: string): Target => byKey.get(key) as Target;
    const e = await createEngine("oracle-5xx");

    // /batch after /reset_data: Atropos marks the run started, then raises.
    await atroposCall(e, "trainer", "POST", "/register", ATROPOS_REGISTRATION);
    await atroposCall(e, "trainer", "GET", "/reset_data");
    const raised = await atroposCall(e, "trainer", "GET", "/batch");
    expect(raised).toMatchObject({ status: 500, text: "Internal Server Error" });
    expect(judge(doc, target("get /e/{engine}/t/{token}/atropos/batch"), "GET", raised)).toBe(false);
    // The same answer where the document lists no 500, or as JSON, breaks the rule.
    expect(() => judge(doc, target("get /e/{engine}/t/{token}/atropos/status"), "GET", raised)).toThrow(/a 500/);
    expect(() => judge(doc, target("get /e/{engine}/t/{token}/atropos/batch"), "GET", { ...raised, contentType: "application/json" })).toThrow(/a 500/);

    // A bound of one group, then two: the second is refused 503 queue_full, a refusal.
    await atroposCall(e, "trainer", "POST", "/config", { max_groups: 1 });
    expect((await atroposCall(e, "trainer", "POST", "/scored_data", atroposGroup(2, null))).status).toBe(200);
    const full = await atroposCall(e, "trainer", "POST", "/scored_data", atroposGroup(2, null));
    expect(full.status).toBe(503);
    expect(JSON.parse(full.text)).toMatchObject({ error: "queue_full" });
    expect(judge(doc, target("post /e/{engine}/t/{token}/atropos/scored_data"), "POST", full)).toBe(true);
    expect(() => judge(doc, target("post /e/{engine}/t/{token}/atropos/register"), "POST", full)).toThrow(/a 503/);
    // The document's mark is what makes it an answer: without x-refusal-codes the same 503 breaks the rule.
    const unmarked = structuredClone(doc);
    const scored = unmarked.paths["/e/{engine}/t/{token}/atropos/scored_data"]?.["post"];
    expect(scored?.responses["503"]?.["x-refusal-codes"]).toEqual(["queue_full", "storage_full"]);
    delete scored?.responses["503"]?.["x-refusal-codes"];
    const unmarkedTarget = targets(unmarked).find((t) => t.key === "post /e/{engine}/t/{token}/atropos/scored_data") as Target;
    expect(() => judge(unmarked, unmarkedTarget, "POST", full)).toThrow(/a 503/);
    // A documented 503 of another kind (a store that failed) is still a bug here.
    expect(() => judge(doc, target("post /e/{engine}/t/{token}/atropos/scored_data"), "POST", { ...full, text: JSON.stringify({ error: "ledger_unavailable", detail: "x" }) })).toThrow(/a 503/);
  });

  it("takes the rollout buffer's 503 paced on /steps as the refusal its document marks", async () => {
    const doc = (await (await workerFetch(`${ORIGIN}/openapi.json`)).json()) as Doc;
    const steps = targets(doc).find((t) => t.key === "post /e/{engine}/steps") as Target;
    expect(doc.paths["/e/{engine}/steps"]?.["post"]?.responses["503"]?.["x-refusal-codes"]).toEqual(["paced", "buffer_full", "storage_full"]);
    // Pace with a trainer that moved on: a batch opening a new group is held back.
    const e = await createEngine("oracle-paced");
    await e.as("trainer").startRollout({ num_repeat_per_sample: 2, job_session: "job-1" });
    await e.as("operator").configureBuffer({ staleness_policy: "pace", max_staleness: 1, rollouts_per_version: 2 });
    const row = (session: string, group: string, done: boolean) => ({ session_id: session, group_id: group, step_index: 0, messages: [], response: "r", reward: 1, is_session_completed: done });
    await e.as("client").postSteps({ steps: [row("s1", "g1", true), row("s2", "g1", false), row("s3", "g2", false)] });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.OFFLINE", weight_version: 2 });
    const res = await workerFetch(`${ORIGIN}/e/${e.name}/steps`, { method: "POST", headers: { authorization: `Bearer ${e.tokens.client}`, "content-type": "application/json" }, body: JSON.stringify({ steps: [row("s9", "g9", false)] }) });
    const paced = { status: res.status, contentType: res.headers.get("content-type"), text: await res.text() };
    expect(paced.status).toBe(503);
    expect(JSON.parse(paced.text)).toMatchObject({ error: "paced" });
    expect(judge(doc, steps, "POST", paced)).toBe(true);
  });

  it("takes a full store's 503 storage_full as a refusal on the routes that add data, and nowhere else", async () => {
    const doc = (await (await workerFetch(`${ORIGIN}/openapi.json`)).json()) as Doc;
    const byKey = new Map(targets(doc).map((t) => [t.key, t]));
    const target = (key: string): Target => byKey.get(key) as Target;
    const e = await createEngine("oracle-store");
    await runInDurableObject(e.stub, (instance: EngineObject) => {
      instance.storageHighWater = 1;
    });
    const row = { session_id: "s1", group_id: "g1", step_index: 0, messages: [], response: "r", reward: 1, is_session_completed: true };
    const res = await workerFetch(`${ORIGIN}/e/${e.name}/steps`, { method: "POST", headers: { authorization: `Bearer ${e.tokens.client}`, "content-type": "application/json" }, body: JSON.stringify({ steps: [row] }) });
    const steps = { status: res.status, contentType: res.headers.get("content-type"), text: await res.text() };
    expect(steps.status).toBe(503);
    expect(JSON.parse(steps.text)).toMatchObject({ error: "storage_full" });
    expect(judge(doc, target("post /e/{engine}/steps"), "POST", steps)).toBe(true);
    const env = await atroposCall(e, "client", "POST", "/register-env", { max_token_length: 2048, desired_name: "env", weight: 1, group_size: 2, min_batch_allocation: null });
    expect(env.status).toBe(503);
    expect(judge(doc, target("post /e/{engine}/t/{token}/atropos/register-env"), "POST", env)).toBe(true);
    // The same answer on a route that never refuses for the store breaks the rule.
    expect(() => judge(doc, target("post /e/{engine}/claim_episode"), "POST", steps)).toThrow(/a 503/);
  });
});
