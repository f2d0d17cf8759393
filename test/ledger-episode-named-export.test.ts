/**
 * An episode may be named anything of 1 to 512 characters, `export` and `media` included. Its
 * latest claim is `/trajectories/<episode_uuid>`, but `/trajectories/export` is the export: an
 * episode named so is read as `/trajectories/export/latest` (`latest` names the latest claim
 * where a fence would), which LedgerClient does for it. `/trajectories/media/<fence>` passes on
 * to the episode named `media` (a fence is no digest).
 */
import { describe, expect, it } from "vitest";
import { LedgerClient } from "../src/client";
import { batchOf, callRecord, postCalls } from "./support/ledger";
import { createEngine, ORIGIN, raw, workerFetch } from "./support/harness";

describe("an episode named export", () => {
  it("is read by its latest claim as by its fence", async () => {
    const e = await createEngine("export-name");
    const ledger = new LedgerClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens.viewer, fetch: workerFetch });
    const messages = [{ role: "user", content: "hi" }];
    const answer = { role: "assistant", content: "hello" };
    for (const episode of ["export", "media"]) {
      expect((await postCalls(e, batchOf([callRecord({ episode, fence: 3, client: "c" }, { body: { messages, answer } })]))).status).toBe(200);
    }

    // By its fence, and the episode named "media" by either path: fine.
    expect(await ledger.trajectory("export", 3)).toMatchObject({ episode_uuid: "export", fence: 3, outcome: null });
    expect(await ledger.trajectory("media")).toMatchObject({ episode_uuid: "media", fence: 3 });

    // Its latest claim, through the client and by hand; `latest` names any episode's.
    expect((await raw(`/e/${e.name}/trajectories/export/latest`, { token: e.tokens.viewer })).json).toMatchObject({ episode_uuid: "export", fence: 3 });
    expect((await raw(`/e/${e.name}/trajectories/media/latest`, { token: e.tokens.viewer })).json).toMatchObject({ episode_uuid: "media", fence: 3 });
    const latest = await ledger.trajectory("export").catch((x: unknown) => x);
    expect(latest).toMatchObject({ episode_uuid: "export", fence: 3, outcome: null });
    const revalidated = await ledger.trajectoryIfChanged("export", null).catch((x: unknown) => x);
    expect(revalidated).toMatchObject({ trajectory: { episode_uuid: "export", fence: 3 } });
  });
});

describe("an episode named '.' or '..'", () => {
  it("is not registered, and LedgerClient refuses to read one rather than read the path a URL parser makes of it", async () => {
    const e = await createEngine("dot-name");
    for (const name of [".", ".."]) {
      const r = await raw(`/e/${e.name}/register_episode`, { token: e.tokens.trainer, body: JSON.stringify({ episode_uuid: name }) });
      expect(r.status).toBe(422);
      expect(JSON.stringify(r.json)).toContain("dot-segment");
    }
    expect((await e.as("viewer").overview()).episodes.registered).toBe(0);

    // Calls recorded under "." before (an exchange older than the refusal): "./5" is "/5" to a URL
    // parser, the latest claim of the episode named "5". The client refuses without a request.
    const ledger = new LedgerClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens.viewer, fetch: workerFetch });
    const messages = [{ role: "user", content: "hi" }];
    for (const [episode, fence] of [[".", 5], ["5", 9]] as const) {
      expect((await postCalls(e, batchOf([callRecord({ episode, fence, client: "c" }, { body: { messages, answer: { role: "assistant", content: episode } } })]))).status).toBe(200);
    }
    for (const read of [() => ledger.trajectory(".", 5), () => ledger.trajectory(".."), () => ledger.trajectoryIfChanged(".", null, 5)]) {
      await expect(read()).rejects.toThrow(/dot-segment/);
    }
    expect(await ledger.trajectory("5")).toMatchObject({ episode_uuid: "5", fence: 9 });
  });
});
