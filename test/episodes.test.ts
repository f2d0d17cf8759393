import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { EngineClient, ExchangeError } from "../src/client";
import type { EngineObject } from "../src/engine/engine-object";
import { NO_EPISODES_CAUSE, notReadyCause } from "../src/engine/rules";
import { ENGINE_STATUSES } from "../src/protocol/status";
import { ORIGIN, admin as adminApi, advance, claimKeyFields, createEngine, endBody, engineStats, raw, reconnect, rollingWith, workerFetch, type TestEngine } from "./support/harness";

type Sign = SubtleCrypto["sign"];

/**
 * Runs `fn` with crypto.subtle.sign replaced by `replacement` (given the real one). Replacing it
 * is the only way a test can make the platform's WebCrypto fail or observe when it is called:
 * workerd has no switch for either.
 */
async function withSign<T>(replacement: (real: Sign) => Sign, fn: () => Promise<T>): Promise<T> {
  const subtle = crypto.subtle as unknown as { sign: Sign };
  const real = subtle.sign;
  subtle.sign = replacement(real.bind(crypto.subtle) as Sign);
  try {
    return await fn();
  } finally {
    subtle.sign = real;
  }
}

const admin = { admin: true } as const;

describe("register and claim", () => {
  it("hands out episodes first in, first out, with a per-claim key and the origin's /v1", async () => {
    const e = await createEngine();
    const ids = await rollingWith(e, 5);
    const client = e.as("client");
    const got: string[] = [];
    for (let i = 0; i < 5; i++) {
      const c = await client.claimEpisode({ client_uuid: `c${i}`, episode_type: "train", discard_episode_timeout: 60 });
      expect(c.success).toBe(true);
      expect(c.openai_base_url).toBe(`${ORIGIN}/v1`);
      expect(c.openai_api_key).toMatch(new RegExp(`^sk-rx\\.${e.name}\\.[\\w-]+\\.1\\.`));
      expect(c.openai_api_key).not.toContain("sk-ajet-secret");
      expect(c.fence).toBe(1);
      got.push(c.episode_uuid);
    }
    expect(got).toEqual(ids);
    const none = await client.claimEpisode({ client_uuid: "late", discard_episode_timeout: 60 });
    expect(none).toEqual({ success: false, client_uuid: "late", episode_uuid: "", openai_base_url: "", openai_api_key: "", fail_cause: NO_EPISODES_CAUSE });
  });

  it("refuses claims outside ROLLING with the seed's text for each status", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    for (const status of ENGINE_STATUSES.filter((s) => s !== "ENGINE.ROLLING")) {
      await e.as("trainer").updateEngineStatus({ engine_status: status });
      const c = await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
      expect(c).toMatchObject({ success: false, client_uuid: "c", episode_uuid: "", fail_cause: notReadyCause(status) });
    }
  });

  it("registers only while ROLLING, and a retried registration keeps its place", async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    const off = await trainer.registerEpisode({ episode_uuid: "x" });
    expect(off).toEqual({ success: false, failure_reason: "Engine is not in rolling state. Cannot register episode." });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING" });
    await trainer.registerEpisode({ episode_uuid: "a" });
    await trainer.registerEpisode({ episode_uuid: "b" });
    await trainer.registerEpisode({ episode_uuid: "a", openai_api_key: "sk-new" });
    const buf = await trainer.getEpisodeBuffer();
    expect(buf.buffer.map((x) => x.episode_uuid)).toEqual(["a", "b"]);
    expect(buf.buffer[0]?.openai_api_key).toBe("sk-new");
    const c = await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    expect(c.episode_uuid).toBe("a");
    // Re-registering a claimed episode does not disturb the claim.
    await trainer.registerEpisode({ episode_uuid: "a", openai_api_key: "sk-late" });
    expect(await e.as("client").canContinueEpisode({ client_uuid: "c", episode_uuid: "a" })).toEqual({ can_continue: true });
    expect((await trainer.getEpisodeBuffer()).buffer.find((x) => x.episode_uuid === "a")).toMatchObject({ openai_api_key: "sk-new" });
  });

  it("gives 200 concurrent claims on 20 episodes exactly 20 winners, no episode twice", async () => {
    const e = await createEngine();
    const ids = await rollingWith(e, 20);
    const client = e.as("client");
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) => client.claimEpisode({ client_uuid: `c${i}`, discard_episode_timeout: 60 })),
    );
    const winners = results.filter((r) => r.success);
    expect(winners).toHaveLength(20);
    expect(new Set(winners.map((w) => w.episode_uuid)).size).toBe(20);
    expect(new Set(winners.map((w) => w.episode_uuid))).toEqual(new Set(ids));
    for (const r of results.filter((r) => !r.success)) expect(r.fail_cause).toBe(NO_EPISODES_CAUSE);
    expect(await engineStats(e)).toMatchObject({ registered: 0, claimed: 20 });
  });

  it("a claim whose per-claim key cannot be signed leaves nothing behind: the episode stays at the queue's head, claimed by no one", async () => {
    const e = await createEngine();
    const [id] = await rollingWith(e, 1);
    const outcome = await runInDurableObject(e.stub, (instance: EngineObject) =>
      withSign(
        () => () => Promise.reject(new Error("injected: signing failed")),
        () => instance.claimEpisode(admin, { client_uuid: "C", episode_type: "train", discard_episode_timeout: 600 }, ORIGIN).then(
          (r) => ({ threw: false, r: JSON.stringify(r) }),
          (err: unknown) => ({ threw: true, r: String(err) }),
        ),
      ),
    );
    // The client got no key (the call failed)...
    expect(outcome).toMatchObject({ threw: true, r: expect.stringContaining("injected") });
    // ...so there is no claim: the engine wrote nothing, and needs no restart to say so.
    await reconnect(e);
    expect(await engineStats(e)).toMatchObject({ registered: 1, claimed: 0, alarm_at: null });
    expect(await e.as("client").claimEpisode({ client_uuid: "D", discard_episode_timeout: 60 })).toMatchObject({ success: true, episode_uuid: id, fence: 1 });
  });

  it("claims arriving together each sign once, for successive heads of the queue", async () => {
    const e = await createEngine();
    const ids = await rollingWith(e, 3);
    const signed = await runInDurableObject(e.stub, async (instance: EngineObject) => {
      let calls = 0;
      const claims = await withSign(
        (real) => (...args) => {
          calls++;
          return real(...args);
        },
        () => Promise.all(["a", "b", "c"].map((c) => instance.claimEpisode(admin, { client_uuid: c, episode_type: "train", discard_episode_timeout: 60 }, ORIGIN))),
      );
      return { calls, claims: claims.map((r) => (r.ok ? [r.body.client_uuid, r.body.episode_uuid] : null)) };
    });
    expect(signed).toEqual({ calls: 3, claims: [["a", ids[0]], ["b", ids[1]], ["c", ids[2]]] });
  });

  it("a claim whose episode is taken back while its key is signed claims the next one, with a key of its own", async () => {
    const e = await createEngine();
    const ids = await rollingWith(e, 2);
    const r = await runInDurableObject(e.stub, (instance: EngineObject) => {
      let first = true;
      return withSign(
        (real) => (...args) => {
          // The trainer unregisters the head while the claim that picked it signs its key.
          if (first) void instance.isEpisodeClaimed(admin, ids[0]!, true);
          first = false;
          return real(...args);
        },
        () => instance.claimEpisode(admin, { client_uuid: "C", episode_type: "train", discard_episode_timeout: 60 }, ORIGIN),
      );
    });
    expect(r).toMatchObject({ ok: true, body: { success: true, episode_uuid: ids[1], fence: 1 } });
    expect(await engineStats(e)).toMatchObject({ registered: 0, claimed: 1 });
    // The key is signed for the episode it got, not for the one it picked first.
    const key = r.ok ? r.body.openai_api_key : "";
    expect(await claimKeyFields(key)).toMatchObject({ episode_uuid: ids[1], fence: 1 });
  });

  it("records throttle_policy.current_task_id as the episode's task", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await e.as("client").claimEpisode({
      client_uuid: "c",
      discard_episode_timeout: 30,
      throttle_policy: { ratio: 1.5, expected_batch_size: 8, expected_num_repeat: 4, current_task_id: "math-17" },
    });
    const buf = await e.as("viewer").getEpisodeBuffer();
    expect(buf.buffer[0]).toMatchObject({ episode_uuid: c.episode_uuid, optional_task_id: "math-17", episode_status: "claimed", client_uuid: "c", discard_episode_timeout: 30 });
  });
});

describe("end, abort, continue", () => {
  it("ends a claimed train episode once; a repeat of the same claim succeeds without counting twice", async () => {
    const e = await createEngine();
    await rollingWith(e, 2);
    const client = e.as("client");
    const c = await client.claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    expect(await client.endEpisode(endBody("c", c.episode_uuid, 1))).toEqual({ success: true });
    expect(await client.endEpisode(endBody("c", c.episode_uuid, 1))).toEqual({ success: true });
    expect(await client.canContinueEpisode({ client_uuid: "c", episode_uuid: c.episode_uuid })).toEqual({ can_continue: false });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    const h = await e.as("viewer").getRewardHistory();
    expect(h.history).toEqual([expect.objectContaining({ global_step: 0, mean_reward: 1, count: 1 })]);
    expect(await engineStats(e)).toMatchObject({ registered: 1, claimed: 0 });
  });

  it("requires the claiming client and a matching task_id", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const client = e.as("client");
    const c = await client.claimEpisode({ client_uuid: "owner", discard_episode_timeout: 60 });
    await expect(client.endEpisode(endBody("thief", c.episode_uuid, 1))).rejects.toMatchObject({ status: 409, code: "claim_lost" });
    const mismatch = { ...endBody("owner", c.episode_uuid, 1, "t1"), task_id: "t2" };
    await expect(client.endEpisode(mismatch)).rejects.toMatchObject({ status: 422 });
    const noTask = { client_uuid: "owner", episode_uuid: c.episode_uuid, task_id: "t1", workflow_output: { reward: 1, metadata: {} } };
    await expect(client.endEpisode(noTask)).rejects.toMatchObject({ status: 422, detail: "workflow_output.metadata must contain task_id" });
    await expect(client.endEpisode(endBody("owner", "nope", 1))).rejects.toMatchObject({ status: 404 });
    // None of that changed anything: the owner can still end it.
    expect(await client.canContinueEpisode({ client_uuid: "owner", episode_uuid: c.episode_uuid })).toEqual({ can_continue: true });
    expect(await client.endEpisode(endBody("owner", c.episode_uuid, 0.5))).toEqual({ success: true });
  });

  it("refuses end outside the rolling statuses", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING_POST" });
    expect(await e.as("client").canContinueEpisode({ client_uuid: "c", episode_uuid: c.episode_uuid })).toEqual({ can_continue: true });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    const err = await e.as("client").endEpisode(endBody("c", c.episode_uuid, 1)).catch((x: unknown) => x);
    expect(err).toBeInstanceOf(ExchangeError);
    expect(err).toMatchObject({ status: 400, code: "engine_not_rolling" });
    expect(await e.as("client").canContinueEpisode({ client_uuid: "c", episode_uuid: c.episode_uuid })).toEqual({ can_continue: false });
  });

  it("abort puts the episode back at the end of the queue in ROLLING and deletes it in ROLLING_POST", async () => {
    const e = await createEngine();
    await rollingWith(e, 3);
    const client = e.as("client");
    const a = await client.claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    expect(await client.abortEpisode({ client_uuid: "c", episode_uuid: a.episode_uuid, task_id: "", workflow_output: { reward: 0, metadata: {} } })).toEqual({ success: true });
    const order = (await e.as("viewer").getEpisodeBuffer()).buffer.map((x) => x.episode_uuid);
    expect(order).toEqual(["ep-1", "ep-2", "ep-0"]);
    const b = await client.claimEpisode({ client_uuid: "c2", discard_episode_timeout: 60 });
    expect(b.episode_uuid).toBe("ep-1");
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING_POST" });
    // A client that does not hold the claim cannot abort it.
    await expect(client.abortEpisode({ client_uuid: "c", episode_uuid: b.episode_uuid })).rejects.toMatchObject({ status: 409 });
    expect(await client.abortEpisode({ client_uuid: "c2", episode_uuid: b.episode_uuid })).toEqual({ success: true });
    expect((await e.as("viewer").getEpisodeBuffer()).buffer.map((x) => x.episode_uuid)).toEqual(["ep-2", "ep-0"]);
    // Unknown episodes and non-rolling engines: success, as the seed answers (clients swallow abort errors).
    expect(await client.abortEpisode({ client_uuid: "c", episode_uuid: "ghost" })).toEqual({ success: true });
    // A registered episode no one claimed is no claim to give back.
    await expect(client.abortEpisode({ client_uuid: "c", episode_uuid: "ep-2" })).rejects.toMatchObject({ status: 409, code: "claim_lost" });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.OFFLINE" });
    const before = await e.as("viewer").getEpisodeBuffer();
    expect(await client.abortEpisode({ client_uuid: "c", episode_uuid: "ep-2" })).toEqual({ success: true });
    expect(await e.as("viewer").getEpisodeBuffer()).toEqual(before);
  });

  it("answers an abort sent again as the first, and changes nothing more; another client's or a reaped claim's abort is still refused", async () => {
    const e = await createEngine();
    await rollingWith(e, 2);
    const client = e.as("client");
    const a = await client.claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    const abort = { client_uuid: "c", episode_uuid: a.episode_uuid, fence: a.fence, task_id: "", workflow_output: { reward: 0, metadata: {} } };
    expect(await client.abortEpisode(abort)).toEqual({ success: true });
    const before = (await e.as("viewer").getEpisodeBuffer()).buffer.map((x) => x.episode_uuid);
    // The repeat, with its fence and without: answered as the first, the queue untouched.
    expect(await client.abortEpisode(abort)).toEqual({ success: true });
    expect(await client.abortEpisode({ ...abort, fence: undefined })).toEqual({ success: true });
    expect((await e.as("viewer").getEpisodeBuffer()).buffer.map((x) => x.episode_uuid)).toEqual(before);
    // Not a repeat: another client, or a fence this client's abort did not carry.
    await expect(client.abortEpisode({ ...abort, client_uuid: "other" })).rejects.toMatchObject({ status: 409, code: "claim_lost" });
    await expect(client.abortEpisode({ ...abort, fence: (a.fence ?? 0) + 7 })).rejects.toMatchObject({ status: 409, code: "claim_lost" });
    // Claimed again, by another client: a late repeat with its fence is still the repeat, and the new claim stands.
    await client.claimEpisode({ client_uuid: "c2", discard_episode_timeout: 60 });
    const again = await client.claimEpisode({ client_uuid: "c2", discard_episode_timeout: 60 });
    expect(again.episode_uuid).toBe(a.episode_uuid);
    expect(await client.abortEpisode(abort)).toEqual({ success: true });
    await expect(client.abortEpisode({ ...abort, fence: undefined })).rejects.toMatchObject({ status: 409, code: "claim_lost" });
    expect(await client.canContinueEpisode({ client_uuid: "c2", episode_uuid: a.episode_uuid })).toEqual({ can_continue: true });
    expect(await engineStats(e)).toMatchObject({ claimed: 2 });
  });

  it("ends an eval episode without counting its reward and serves the episode again", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const client = e.as("client");
    const c = await client.claimEpisode({ client_uuid: "c", episode_type: "eval", discard_episode_timeout: 60 });
    expect(await client.endEpisode(endBody("c", c.episode_uuid, 0.3))).toEqual({ success: true });
    const again = await client.claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    expect(again).toMatchObject({ success: true, episode_uuid: c.episode_uuid, fence: 2 });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    expect((await e.as("viewer").getRewardHistory()).history).toEqual([]);
  });
});

describe("a claim belongs to the token that made it", () => {
  /** A second client token of the engine, as a lab issues one per rollout host. */
  async function secondClient(e: TestEngine): Promise<EngineClient> {
    const issued = await adminApi.issueToken(e.name, "client", "host B");
    return new EngineClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: issued.token, fetch: workerFetch });
  }

  // What a user saw (review): a lab gives each rollout host (or team) of an engine its own client
  // token, as docs/security.md advises, so that one can be revoked alone. Host B's token, reading
  // running_episodes (open to every role), learned host A's client_uuid, episode and fence, and
  // ended host A's live claim with a reward of its choosing: the engine took it, host A's own
  // end was then refused, and the trainer trained on B's made-up reward. The claim already
  // recorded the token that made it (claimed_by); end_episode never compared it.
  it("refuses to end a claim made with another client token", async () => {
    const e = await createEngine("iso-claim");
    await rollingWith(e, 1);
    const a = e.as("client");
    const b = await secondClient(e);

    const claim = await a.claimEpisode({ client_uuid: "host-a", discard_episode_timeout: 600 });
    expect(claim.success).toBe(true);
    // Everything B needs is in a view every role may read.
    const running = await b.runningEpisodes();
    const seen = running.episodes[0]!;
    expect(seen).toMatchObject({ client_uuid: "host-a", episode_uuid: claim.episode_uuid });

    // Refused as another client's end is (AgentJet's client reads 409 claim_lost), with and without the fence.
    const forged = endBody(seen.client_uuid, seen.episode_uuid, 1.0);
    await expect(b.endEpisode({ ...forged, fence: seen.fence }), "host B's token ended host A's claim with its own reward").rejects.toMatchObject({
      status: 409,
      code: "claim_lost",
      detail: expect.stringContaining("claimed by a different client"),
    });
    await expect(b.endEpisode(forged)).rejects.toMatchObject({ status: 409, code: "claim_lost" });
    expect(await b.canContinueEpisode({ client_uuid: "host-a", episode_uuid: claim.episode_uuid })).toEqual({ can_continue: false });
    // Host A's claim is untouched: it goes on, and its own reward is the one counted.
    expect(await a.canContinueEpisode({ client_uuid: "host-a", episode_uuid: claim.episode_uuid })).toEqual({ can_continue: true });
    const own = { ...endBody("host-a", claim.episode_uuid, 0.25), fence: claim.fence };
    expect(await a.endEpisode(own)).toEqual({ success: true });
    // B sending A's end again once it ended is answered as the repeat it looks like (the ends keep
    // no token; the pool's views show every token that the claim ended) and changes nothing.
    expect(await b.endEpisode({ ...forged, fence: seen.fence })).toEqual({ success: true });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    expect((await e.as("viewer").getRewardHistory()).history).toEqual([expect.objectContaining({ global_step: 0, mean_reward: 0.25, count: 1 })]);
  });

  // What a user saw (review): the same, for abort: B threw A's work away mid-episode (A's calls
  // through the relay then failed, its per-claim key dead), with nothing in the engine tying the
  // abort to the wrong token.
  it("refuses to abort a claim made with another client token", async () => {
    const e = await createEngine("iso-abort");
    await rollingWith(e, 1);
    const a = e.as("client");
    const b = await secondClient(e);
    const claim = await a.claimEpisode({ client_uuid: "host-a", discard_episode_timeout: 600 });
    expect(claim.success).toBe(true);
    const seen = (await b.runningEpisodes()).episodes[0]!;
    const abort = { client_uuid: seen.client_uuid, episode_uuid: seen.episode_uuid, fence: seen.fence };
    await expect(b.abortEpisode(abort), "host B's token aborted host A's claim").rejects.toMatchObject({ status: 409, code: "claim_lost" });
    await expect(b.abortEpisode({ ...abort, fence: undefined })).rejects.toMatchObject({ status: 409, code: "claim_lost" });
    expect((await a.canContinueEpisode({ client_uuid: "host-a", episode_uuid: claim.episode_uuid })).can_continue).toBe(true);
    expect(await engineStats(e)).toMatchObject({ claimed: 1, registered: 0 });
    // A's own abort still works, and so does its repeat.
    expect(await a.abortEpisode(abort)).toEqual({ success: true });
    expect(await a.abortEpisode(abort)).toEqual({ success: true });
    expect(await engineStats(e)).toMatchObject({ claimed: 0, registered: 1 });
  });

  it("answers the same token's end sent again (its answer lost) as the first, with its fence and without, counted once", async () => {
    const e = await createEngine("iso-repeat");
    await rollingWith(e, 2);
    const a = e.as("client");
    await secondClient(e);
    const claim = await a.claimEpisode({ client_uuid: "host-a", discard_episode_timeout: 600 });
    const end = { ...endBody("host-a", claim.episode_uuid, 0.75), fence: claim.fence };
    expect(await a.endEpisode(end)).toEqual({ success: true });
    expect(await a.endEpisode(end)).toEqual({ success: true });
    expect(await a.endEpisode({ ...end, fence: undefined })).toEqual({ success: true });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    expect((await e.as("viewer").getRewardHistory()).history).toEqual([expect.objectContaining({ global_step: 0, mean_reward: 0.75, count: 1 })]);
  });

  it("leaves a claim tied to no token (the admin's, or made before claims recorded theirs) to any token, and lets the admin act on any claim, as before", async () => {
    const e = await createEngine("iso-admin");
    await rollingWith(e, 3);
    const b = await secondClient(e);
    // Made with the admin token: claimed_by is null, any token of the engine may end it.
    const byAdmin = await e.as("admin").claimEpisode({ client_uuid: "ops", discard_episode_timeout: 600 });
    expect(await b.endEpisode(endBody("ops", byAdmin.episode_uuid, 1))).toEqual({ success: true });
    // Made before engine migration 17: no token recorded either.
    const old = await e.as("client").claimEpisode({ client_uuid: "old", discard_episode_timeout: 600 });
    await runInDurableObject(e.stub, (_: EngineObject, state) => {
      state.storage.sql.exec("UPDATE episodes SET claimed_by = NULL WHERE episode_uuid = ?", old.episode_uuid);
    });
    expect(await b.canContinueEpisode({ client_uuid: "old", episode_uuid: old.episode_uuid })).toEqual({ can_continue: true });
    expect(await b.abortEpisode({ client_uuid: "old", episode_uuid: old.episode_uuid })).toEqual({ success: true });
    // The admin may end a token's claim (it could revoke the token, which releases the claim).
    const mine = await e.as("client").claimEpisode({ client_uuid: "host-a", discard_episode_timeout: 600 });
    expect(await e.as("admin").endEpisode(endBody("host-a", mine.episode_uuid, 0.5))).toEqual({ success: true });
  });
});

describe("trainer views", () => {
  it("is_episode_claimed answers and can unregister an unclaimed episode", async () => {
    const e = await createEngine();
    await rollingWith(e, 2);
    const trainer = e.as("trainer");
    const c = await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    expect(await trainer.isEpisodeClaimed({ episode_uuid: c.episode_uuid })).toMatchObject({ success: true });
    expect(await trainer.isEpisodeClaimed({ episode_uuid: "ep-1" })).toMatchObject({ success: false });
    expect((await trainer.getEpisodeBuffer()).buffer).toHaveLength(2);
    expect(await trainer.isEpisodeClaimed({ episode_uuid: "ep-1", unregister_if_not_claimed: true })).toMatchObject({ success: false });
    expect((await trainer.getEpisodeBuffer()).buffer.map((x) => x.episode_uuid)).toEqual([c.episode_uuid]);
    expect(await trainer.isEpisodeClaimed({ episode_uuid: "ghost" })).toMatchObject({ success: false });
  });

  it("is_episode_claimed answers claimed while an ended episode's result is on its way to its runner, as the seed does until the runner's ack", async () => {
    const e = await createEngine("deliv");
    const ids = await rollingWith(e, 2, { zmq: true });
    const client = e.as("client");
    const trainer = e.as("trainer");
    for (const id of ids) {
      expect(await client.claimEpisode({ client_uuid: `c-${id}`, discard_episode_timeout: 60 })).toMatchObject({ success: true, episode_uuid: id });
      expect(await client.endEpisode(endBody(`c-${id}`, id, 1))).toEqual({ success: true });
    }
    // The deliver commands are queued, not yet handed out or acked: the runners have no result.
    expect(await engineStats(e)).toMatchObject({ pending_commands: 2, registered: 0, claimed: 0 });
    // The trainer's runner asks, as at the end of a batch, taking back what nobody claimed: twice, and nothing is taken back.
    for (let i = 0; i < 2; i++) {
      for (const id of ids) expect(await trainer.isEpisodeClaimed({ episode_uuid: id, unregister_if_not_claimed: true })).toMatchObject({ success: true });
    }
    const { commands } = await trainer.pollCommands();
    expect(commands.map((c) => c.body)).toEqual(ids.map((id) => expect.objectContaining({ kind: "deliver", episode_uuid: id })));
    // One runner got its result, the agent gave up on the other: the seed has moved both records to its finished ones.
    await trainer.ackCommand({ seq: commands[0]!.seq, ok: true, detail: "runner acked" });
    await trainer.ackCommand({ seq: commands[1]!.seq, ok: false, detail: "runner did not ack within 30 s" });
    for (const id of ids) expect(await trainer.isEpisodeClaimed({ episode_uuid: id, unregister_if_not_claimed: true })).toMatchObject({ success: false });
  });

  it("shows the trainer's secrets to the trainer only", async () => {
    const e = await createEngine();
    await rollingWith(e, 1, { zmq: true });
    await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    const forTrainer = (await e.as("trainer").getEpisodeBuffer()).buffer[0];
    expect(forTrainer).toMatchObject({ openai_api_key: "sk-ajet-secret-0", zmq_listen_result_addr: "tcp://10.0.0.1:20000" });
    for (const role of ["client", "viewer", "operator"] as const) {
      const b = await e.as(role).getEpisodeBuffer();
      const text = JSON.stringify(b);
      expect(text).not.toContain("sk-ajet-secret");
      expect(text).not.toContain("tcp://");
      expect(b.buffer[0]).toMatchObject({ episode_uuid: "ep-0", episode_status: "claimed", discard_episode_timeout: 60 });
    }
  });

  it("computes running episode details and completed task clients itself", async () => {
    const e = await createEngine();
    await rollingWith(e, 3);
    const trainer = e.as("trainer");
    await trainer.updatePoolInfo({
      sample_collection_method: "rollout_until_finish_enough_tasks",
      completed_episodes: 7,
      completed_task_target: 32,
      running_episode_details: { forged: { client_uuid: "x" } },
      completed_tasks_client_uuids: { forged: ["x"] },
    });
    const client = e.as("client");
    const tp = (task: string) => ({ ratio: 1.5, expected_batch_size: 2, expected_num_repeat: 2, current_task_id: task });
    const a = await client.claimEpisode({ client_uuid: "ca", discard_episode_timeout: 60, throttle_policy: tp("t1") });
    const b = await client.claimEpisode({ client_uuid: "cb", discard_episode_timeout: 90, throttle_policy: tp("t2") });
    await client.endEpisode(endBody("ca", a.episode_uuid, 1, "t1"));
    e.clock.t += 12_340;
    const info = await e.as("viewer").getPoolInfo();
    expect(info).toMatchObject({
      sample_collection_method: "rollout_until_finish_enough_tasks",
      completed_episodes: 7,
      completed_task_target: 32,
      engine_status: "ENGINE.ROLLING",
      global_step: 0,
      completed_tasks_client_uuids: { t1: ["ca"] },
      running_episode_details: {
        [b.episode_uuid]: {
          episode_status: "claimed",
          time_since_last_activity: "12.3s",
          discard_episode_timeout: "90.0s",
          llm_call_count: "0",
          client_uuid: "cb",
          optional_task_id: "t2",
        },
      },
    });
    for (const v of Object.values(info.running_episode_details ?? {})) for (const x of Object.values(v)) expect(typeof x).toBe("string");
  });
});

describe("completed tasks of the current step", () => {
  it("counts ended train episodes per task for the current global step only", async () => {
    const e = await createEngine();
    await rollingWith(e, 4);
    const client = e.as("client");
    const end = async (who: string, task: string, reward: number) => {
      const c = await client.claimEpisode({ client_uuid: who, discard_episode_timeout: 60 });
      await client.endEpisode(endBody(who, c.episode_uuid, reward, task));
    };
    await end("a", "t1", 1);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    await end("a", "t1", 1);
    await end("b", "t1", 0);
    await end("b", "t2", 0.5);
    expect(await e.as("viewer").completedTasks()).toEqual({
      global_step: 1,
      tasks: [
        { task_id: "t1", episodes: 2, clients: 2, mean_reward: 0.5, failed: 0 },
        { task_id: "t2", episodes: 1, clients: 1, mean_reward: 0.5, failed: 0 },
      ],
    });
  });
});

describe("what Python clients send", () => {
  // The seed took any discard_episode_timeout (swarm_server.py.txt:611); a client that means never
  // to be reaped sends a huge one. Refused 422, the SwarmClient claimed again every 15 s, for ever.
  it("claims with a discard_episode_timeout past a week, held to a week", async () => {
    const e = await createEngine("long-lease");
    await rollingWith(e, 1);
    const client = e.as("client");
    const c = await client.claimEpisode({ client_uuid: "c", discard_episode_timeout: 30 * 86_400 });
    expect([c.success, (await e.as("viewer").getEpisodeBuffer()).buffer[0]?.discard_episode_timeout]).toEqual([true, 7 * 86_400]);
    await advance(e, 7 * 86_400_000 - 1_000);
    expect(await client.canContinueEpisode({ client_uuid: "c", episode_uuid: c.episode_uuid })).toEqual({ can_continue: true });
    await advance(e, 2_000);
    expect(await client.canContinueEpisode({ client_uuid: "c", episode_uuid: c.episode_uuid })).toEqual({ can_continue: false });
  });

  const claimBody = (c = "c1") => JSON.stringify({ client_uuid: c, episode_type: "train", discard_episode_timeout: 60 });

  // A Python user's workflow logs log_metrics={"acc": float("nan")} (np.mean of an empty list) and
  // calls end_episode through httpx < 0.28 or aiohttp, whose json.dumps writes `NaN`. The seed
  // parsed it (Starlette's request.json is json.loads), pydantic took it (log_metrics: dict), and
  // sent the trainer the output (swarm_server.py.txt:226, model_dump_json writes null). The Worker
  // answered 400 malformed_json: the SwarmClient raised RuntimeError, the episode stayed claimed.
  it("end_episode with NaN in log_metrics is accepted, as the seed accepted it", async () => {
    const e = await createEngine("py");
    await rollingWith(e, 4);
    const claim = await raw(`/e/${e.name}/claim_episode`, { token: e.tokens.client, body: claimBody() });
    expect(claim.json).toMatchObject({ success: true });
    const ep = claim.json!["episode_uuid"] as string;
    const wo = `{"reward": 1.0, "is_success": true, "metadata": {"task_id": "t1", "loss": -Infinity}, "log_metrics": {"acc": NaN, "loss": Infinity}}`;
    const r = await raw(`/e/${e.name}/end_episode`, { token: e.tokens.client, body: `{"client_uuid": "c1", "episode_uuid": "${ep}", "task_id": "t1", "workflow_output": ${wo}}` });
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ success: true });
    // Stored as model_dump_json wrote it: the non-finite numbers as null.
    await advance(e, 1_000);
    const row = await env.DB.prepare("SELECT workflow_output FROM trajectories WHERE engine = ? AND episode_uuid = ?").bind(e.name, ep).first<{ workflow_output: string }>();
    expect(JSON.parse(row!.workflow_output)).toMatchObject({ metadata: { task_id: "t1", loss: null }, log_metrics: { acc: null, loss: null } });
  });

  // A user's base URL template writes f"{url}/get_rollout_data/" or "/claim_episode/". FastAPI
  // (redirect_slashes=True, the default in both seeds: buffer_server.py.txt:65) answers 307 to the
  // path without the slash, which requests and aiohttp follow with the body. The Worker: 404.
  it("POST /claim_episode/ and /get_rollout_data/ reach their routes (or redirect there, as FastAPI does)", async () => {
    const e = await createEngine("py");
    await rollingWith(e, 4);
    for (const [path, token] of [["claim_episode/", e.tokens.client], ["get_rollout_data/", e.tokens.trainer]] as const) {
      const r = await raw(`/e/${e.name}/${path}`, { token, body: path.startsWith("claim") ? claimBody() : "{}" });
      expect([path, r.status === 200 || r.status === 307 || r.status === 308]).toEqual([path, true]);
    }
    // Served as the route itself, token-in-path URLs and GETs too; one slash only, and a HEAD of a GET that changes state refused as without the slash.
    expect((await raw(`/e/${e.name}/t/${e.tokens.client}/claim_episode/`, { body: claimBody("c2") })).json).toMatchObject({ success: true, client_uuid: "c2" });
    expect((await raw(`/e/${e.name}/get_engine_status/`, { token: e.tokens.viewer })).json).toMatchObject({ engine_status: "ENGINE.ROLLING" });
    expect((await raw(`/e/${e.name}/claim_episode//`, { token: e.tokens.client, body: claimBody() })).status).toBe(404);
    expect((await raw(`/e/${e.name}/agent/commands/`, { method: "HEAD", token: e.tokens.trainer })).status).toBe(405);
  });
});
