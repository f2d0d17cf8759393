/**
 * A pull's runs are sized by the R2 reads they make (src/ledger/rollout-tokens.ts claimsPerRun):
 * when each claim's calls are in objects of their own, a run of 16 claims reads only its claims'
 * objects, so runs stay 16 claims (their bodies held one run at a time) as long as the reads fit.
 * Budget 40, 32 objects: runs of 16 read 32 in all.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { GetRolloutDataResponse } from "../src/protocol/buffer";
import { packFloats, packInts } from "../src/protocol/packed";
import { withTrainingTokens } from "../src/ledger/rollout-tokens";
import { callRecord, groupOfClaims, postCalls } from "./support/ledger";
import { sys } from "./support/ledger-calls";
import { endBody } from "./support/harness";

const CLAIMS = 32;

describe("a pull's run sizing", () => {
  it("keeps runs of 16 claims when each claim's calls are in an object of its own and runs of 16 fit the R2 budget", async () => {
    const { e, claims } = await groupOfClaims("pull-runs", CLAIMS);
    // Each claim's call in a batch (one R2 object) of its own.
    for (const [k, c] of claims.entries()) {
      const call = callRecord(c, { body: { messages: [sys, { role: "user", content: `q${k}` }], answer: { role: "assistant", content: `a${k}` }, tokens: { prompt_prefix: null, prompt_ids: packInts([1000 + k]), completion_ids: packInts([k]), completion_logprobs: packFloats([-0.5]) } } });
      expect((await postCalls(e, { batch_id: `own-${String(k).padStart(12, "0")}`, calls: [call] })).status).toBe(200);
    }
    for (const c of claims) expect((await e.as("client").endEpisode(endBody(c.client, c.episode, 1, "task-7"))).success).toBe(true);
    const pulled = GetRolloutDataResponse.parse(await e.as("trainer").getRolloutData());
    expect(pulled.data.data).toHaveLength(CLAIMS);
    const raw = { ...pulled, data: { ...pulled.data, data: pulled.data.data.map(({ tokens: _t, response_length: _r, loss_mask: _l, rollout_log_probs: _p, ...item }) => item) } } as GetRolloutDataResponse;

    let gets = 0;
    const bucket = { get: (key: string, opts?: R2GetOptions) => (gets++, env.LEDGER.get(key, opts)) } as unknown as R2Bucket;
    const answer = await withTrainingTokens(env.DB, bucket, e.name, raw, "sequence", 40);
    // The reads made when the first item is written: the first run, 16 claims' objects, not all 32.
    const reader = (answer as ReadableStream<Uint8Array>).pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    let firstRun: number | null = null;
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      text += r.value;
      if (firstRun === null && text.includes('"tokens"')) firstRun = gets;
    }
    const items = GetRolloutDataResponse.parse(JSON.parse(text)).data.data;
    expect(items).toHaveLength(CLAIMS);
    expect(gets).toBe(CLAIMS); // 32 reads in all either way: within the budget of 40
    expect(firstRun).toBe(16);
  });
});
