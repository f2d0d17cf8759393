/**
 * An end sent again without a fence is a repeat only if the episode's latest claim ended and was
 * that client's (docs/agentjet.md, "Claims"). A registration is no claim: a uuid registered again
 * after its result could not be delivered still has the ended claim as its latest until someone
 * claims it. Read off the episode's row, whose fence a registration sets to the engine's next,
 * the repeat was refused 409 claim_lost ("not counted") once other claims had raised the fences.
 */
import { describe, expect, it } from "vitest";
import { createEngine, endBody, engineStats, rollingWith } from "./support/harness";

describe("a fenceless end repeated after its uuid was registered again", () => {
  it("is answered as the repeat it is, although other claims raised the engine's fences meanwhile", async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    const client = e.as("client");
    const [a, b] = await rollingWith(e, 2, { zmq: true });
    // Other work on the engine: ep-0 is claimed, given back, and claimed again (fence 2).
    expect(await client.claimEpisode({ client_uuid: "other", discard_episode_timeout: 60 })).toMatchObject({ episode_uuid: a, fence: 1 });
    expect(await client.abortEpisode({ client_uuid: "other", episode_uuid: a! })).toEqual({ success: true });
    const resets = (await trainer.pollCommands()).commands.filter((c) => c.body.kind === "reset");
    for (const r of resets) await trainer.ackCommand({ seq: r.seq, ok: true });
    // C claims ep-1 (its first claim, fence 1) and ends it; its answer is lost.
    const c = await client.claimEpisode({ client_uuid: "C", discard_episode_timeout: 60 });
    expect(c).toMatchObject({ success: true, episode_uuid: b, fence: 1 });
    expect(await client.claimEpisode({ client_uuid: "other", discard_episode_timeout: 60 })).toMatchObject({ episode_uuid: a, fence: 2 });
    expect(await client.endEpisode(endBody("C", b!, 1))).toEqual({ success: true });
    // The runner cannot be given the result: the trainer registers the uuid again, as documented.
    const deliver = (await trainer.pollCommands()).commands.find((x) => x.body.kind === "deliver")!;
    await trainer.ackCommand({ seq: deliver.seq, ok: false, detail: "runner gone" });
    expect(await trainer.registerEpisode({ episode_uuid: b!, openai_base_url: "http://t:8000/v1", openai_api_key: "sk-2", zmq_listen_result_addr: "tcp://10.0.0.1:20009" })).toEqual({
      success: true,
      failure_reason: "",
    });
    expect(await engineStats(e)).toMatchObject({ registered: 1, claimed: 1 });
    // C, whose answer was lost, sends its end again (AgentJet sends no fence). Nobody claimed ep-1
    // since: its latest claim is C's, which ended. The repeat is answered as the first.
    const repeat = await client.endEpisode(endBody("C", b!, 1)).then(
      (r) => r,
      (err: unknown) => err,
    );
    expect(repeat).toEqual({ success: true });
  });
});
