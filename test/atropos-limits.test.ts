/**
 * What bounds Atropos's registrations: names and paths of at most 1,024 characters (pydantic's
 * string_too_long beyond), at most 10,000 environments until /reset_data clears them, and a
 * scored list of more groups than max_groups alone, which no batch taken could make room for.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { MAX_ATROPOS_ENVS, MAX_ATROPOS_NAME_CHARS } from "../src/protocol/atropos";
import { atropos, ENV, group, REGISTRATION, running } from "./support/atropos";
import { createEngine, type TestEngine } from "./support/harness";

const envCount = (e: TestEngine) => runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM atropos_envs").one().n);
const savedState = (e: TestEngine) => runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec<{ v: string }>("SELECT v FROM kv WHERE k = 'atropos'").toArray()[0]?.v ?? null);

describe("Atropos's API: what registrations may hold", () => {
  it("refuses a trainer's names and checkpoint dir, and an env's name, over 1,024 characters with pydantic's 422, changing nothing", async () => {
    expect(MAX_ATROPOS_NAME_CHARS).toBe(1024);
    const e = await createEngine("atr");
    const long = "n".repeat(MAX_ATROPOS_NAME_CHARS + 1);
    const before = await savedState(e);
    for (const field of ["wandb_group", "wandb_project", "checkpoint_dir"] as const) {
      const r = await atropos(e, "trainer", "POST", "/register", { ...REGISTRATION, [field]: long });
      expect([r.status, r.json]).toEqual([422, { detail: [{ type: "string_too_long", loc: ["body", field], msg: "String should have at most 1024 characters", input: long }] }]);
    }
    expect(await savedState(e)).toBe(before);
    // Characters as Python counts them: 1,024 emoji (2,048 UTF-16 units) are taken.
    const emoji = "😀".repeat(MAX_ATROPOS_NAME_CHARS);
    await running(e, [], { ...REGISTRATION, wandb_group: emoji, checkpoint_dir: "d".repeat(MAX_ATROPOS_NAME_CHARS) });
    expect((await atropos(e, "viewer", "GET", "/wandb_info")).json).toEqual({ group: emoji, project: "p" });

    const refused = await atropos(e, "client", "POST", "/register-env", { ...ENV, desired_name: long });
    expect([refused.status, refused.json.detail[0].type]).toEqual([422, "string_too_long"]);
    expect(await envCount(e)).toBe(0);
    const taken = await atropos(e, "client", "POST", "/register-env", { ...ENV, desired_name: "e".repeat(MAX_ATROPOS_NAME_CHARS) });
    expect(taken.json).toMatchObject({ status: "success", env_id: 0, wandb_name: `${"e".repeat(MAX_ATROPOS_NAME_CHARS)}_0` });
  });

  it("registers at most 10,000 environments, refusing more with a 422 that changes nothing and says only /reset_data clears them, as a trainer's /register does not", async () => {
    expect(MAX_ATROPOS_ENVS).toBe(10_000);
    const e = await createEngine("atr");
    await running(e);
    // 9,998 more envs, as /register-env stores them, without 9,998 requests.
    await runInDurableObject(e.stub, (_i, state) => {
      for (let id = 1; id < MAX_ATROPOS_ENVS - 1; id++) {
        state.storage.sql.exec(
          "INSERT INTO atropos_envs (env_id, desired_name, real_name, max_context_len, weight, group_size, min_batch_allocation, connected, last_update) VALUES (?, 'x', ?, 1024, 1, 2, NULL, 1, 0)",
          id,
          `x_${id - 1}`,
        );
      }
    });
    const last = await atropos(e, "client", "POST", "/register-env", ENV);
    expect(last.json).toMatchObject({ status: "success", env_id: MAX_ATROPOS_ENVS - 1, wandb_name: "gsm8k_1" });
    const over = await atropos(e, "client", "POST", "/register-env", ENV);
    expect(over.status).toBe(422);
    expect(over.json).toMatchObject({ error: "too_many_environments" });
    expect(over.json.detail).toContain("10000");
    expect(over.json.detail).toContain("until the trainer's GET /reset_data clears them");
    expect(over.json.detail).not.toContain("registers again");
    expect(await envCount(e)).toBe(MAX_ATROPOS_ENVS);
    expect((await e.as("viewer").overview()).atropos.environments).toBe(MAX_ATROPOS_ENVS);
    // A trainer registering again while the run's queue is there changes nothing, as in Atropos,
    // whose env ids are places in the list: the cap stays.
    expect((await atropos(e, "trainer", "POST", "/register", REGISTRATION)).status).toBe(200);
    await atropos(e, "trainer", "GET", "/batch");
    expect((await atropos(e, "client", "POST", "/register-env", ENV)).json).toMatchObject({ error: "too_many_environments" });
    expect(await envCount(e)).toBe(MAX_ATROPOS_ENVS);
    // /reset_data clears them: the trainer's next run registers envs from id 0 again.
    expect((await atropos(e, "trainer", "GET", "/reset_data")).text).toBe("Reset successful");
    expect(await envCount(e)).toBe(0);
    await running(e);
    expect(await envCount(e)).toBe(1);
    expect((await atropos(e, "client", "POST", "/register-env", ENV)).json).toMatchObject({ status: "success", env_id: 1, wandb_name: "gsm8k_1" });
  }, 60_000);

  it("refuses with a 413 a list of more groups than max_groups, which no retry could store, and with a 503 one that would pass it with what is held", async () => {
    const e = await createEngine("atr");
    await running(e);
    await atropos(e, "trainer", "POST", "/config", { max_groups: 2 });
    const three = await atropos(e, "client", "POST", "/scored_data_list", [group(1, 2), group(2, 2), group(3, 2)]);
    expect(three.status).toBe(413);
    expect(three.json).toMatchObject({ error: "payload_too_large" });
    expect(three.json.detail).toContain("max_groups");
    expect((await e.as("viewer").overview()).atropos.stored_groups).toBe(0);
    expect((await atropos(e, "client", "POST", "/scored_data_list", [group(1, 2), group(2, 2)])).json).toEqual({ status: "received", groups_processed: 2 });
    const full = await atropos(e, "client", "POST", "/scored_data", group(3, 2));
    expect([full.status, full.json.error, full.headers.get("retry-after")]).toEqual([503, "queue_full", "5"]);
    expect((await e.as("viewer").overview()).atropos.stored_groups).toBe(2);
  });
});
