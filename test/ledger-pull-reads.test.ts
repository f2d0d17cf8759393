/**
 * get_rollout_data reads its claims' calls a run of claims at a time, so that what a pull holds
 * does not grow with the claims pulled. The gateway's shipper batches whatever calls of all its
 * concurrent claims finished within a second, so one R2 object holds calls of many claims,
 * interleaved, and each run reads every object its claims' calls are in: the reads are bounded
 * (runs x objects, within an invocation's budget), and each item still gets its own claim's tokens.
 */
import { env } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { GetRolloutDataResponse } from "../src/protocol/buffer";
import { packFloats, packInts } from "../src/protocol/packed";
import { withTrainingTokens } from "../src/ledger/rollout-tokens";
import { callRecord, groupOfClaims, postCalls } from "./support/ledger";
import { sys } from "./support/ledger-calls";
import { endBody } from "./support/harness";

const CLAIMS = 64;

/** The bucket, counting the bytes its gets return and the objects they came from. */
function counting(bucket: R2Bucket) {
  const seen = new Map<string, number>();
  const reads: number[] = [];
  const wrapped = {
    async get(key: string, opts?: R2GetOptions) {
      const o = await bucket.get(key, opts);
      if (o === null) return null;
      seen.set(key, o.size);
      return {
        size: o.size,
        async arrayBuffer() {
          const b = await o.arrayBuffer();
          reads.push(b.byteLength);
          return b;
        },
      };
    },
  } as unknown as R2Bucket;
  return { bucket: wrapped, stored: () => [...seen.values()].reduce((a, b) => a + b, 0), read: () => reads.reduce((a, b) => a + b, 0), reads };
}

async function interleavedPull() {
  const { e, claims } = await groupOfClaims("pull-reads", CLAIMS);
  // Two turns of every claim, as a gateway relaying 64 agents at once ships them: one batch, in the order they finished.
  const pad = "x".repeat(4000);
  const firsts = claims.map((c, k) =>
    callRecord(c, { body: { messages: [sys, { role: "user", content: `${k} ${pad}` }], answer: { role: "assistant", content: `a${k}` }, tokens: { prompt_prefix: null, prompt_ids: packInts([1000 + k]), completion_ids: packInts([k]), completion_logprobs: packFloats([-0.5]) } } }),
  );
  const seconds = claims.map((c, k) =>
    callRecord(c, {
      body: {
        prefix: { call_id: firsts[k]!.call_id, count: 3 },
        messages: [{ role: "user", content: `more ${k} ${pad}` }],
        answer: { role: "assistant", content: `b${k}` },
        tokens: { prompt_prefix: { call_id: firsts[k]!.call_id, count: 2 }, prompt_ids: packInts([7]), completion_ids: packInts([k]), completion_logprobs: packFloats([-0.25]) },
      },
    }),
  );
  // Finished in an order of their own (a fixed shuffle), the first turns before the second.
  let seed = 12345;
  const shuffled = <T,>(xs: T[]): T[] => {
    const a = [...xs];
    for (let i = a.length - 1; i > 0; i--) {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      const j = seed % (i + 1);
      [a[i], a[j]] = [a[j] as T, a[i] as T];
    }
    return a;
  };
  expect((await postCalls(e, { batch_id: "interleaved-0001", calls: [...shuffled(firsts), ...shuffled(seconds)] })).status).toBe(200);
  for (const c of claims) expect((await e.as("client").endEpisode(endBody(c.client, c.episode, 1, "task-7"))).success).toBe(true);
  const pulled = GetRolloutDataResponse.parse(await e.as("trainer").getRolloutData());
  expect(pulled.data.data).toHaveLength(CLAIMS);
  // The pull as it came from the engine's object, its tokens to be added again with a counting bucket.
  const raw = { ...pulled, data: { ...pulled.data, data: pulled.data.data.map(({ tokens: _t, response_length: _r, loss_mask: _l, rollout_log_probs: _p, ...item }) => item) } };
  return { e, claims, raw: raw as GetRolloutDataResponse };
}

/** Each claim's own sequence: its first prompt and completion, the second turn's new prompt id, its completion. */
const own = (session: unknown, claims: readonly { episode: string; fence: number }[]) => {
  const k = claims.findIndex((c) => `${c.episode}#${c.fence}` === session);
  return [1000 + k, k, 7, k];
};

describe("a pull's claims read a run at a time from interleaved batches", () => {
  it("gives each of 64 claims, whose calls share one object, its own tokens, reading the object once per run of 16", async () => {
    const { e, claims, raw } = await interleavedPull();
    const r2 = counting(env.LEDGER);
    const answer = await withTrainingTokens(env.DB, r2.bucket, e.name, raw, "sequence");
    const items = GetRolloutDataResponse.parse(JSON.parse(await new Response(answer as ReadableStream).text())).data.data;
    expect(items.map((i) => i.tokens)).toEqual(items.map((i) => own(i.extra_info["session_id"], claims)));
    expect(r2.reads).toHaveLength(CLAIMS / 16);
  });

  it("makes runs longer rather than pass its budget of R2 reads", async () => {
    const { e, claims, raw } = await interleavedPull();
    const r2 = counting(env.LEDGER);
    const answer = await withTrainingTokens(env.DB, r2.bucket, e.name, raw, "turns", 2);
    const items = GetRolloutDataResponse.parse(JSON.parse(await new Response(answer as ReadableStream).text())).data.data;
    expect(items.map((i) => i.turns?.map((t) => t.tokens))).toEqual(items.map((i) => {
      const [p, c1, n, c2] = own(i.extra_info["session_id"], claims);
      return [[p, c1], [p, c1, n, c2]];
    }));
    expect(r2.reads).toHaveLength(2);
  });

  // The engine has handed the groups out: a read that failed before the cursor was sent lost them.
  it.each([
    ["the first run's", 1],
    ["a later run's", 2],
  ])("breaks the answer off when %s read fails, the cursor already sent and the cause logged with an id", async (_which, failingRead) => {
    const { e, raw } = await interleavedPull();
    let gets = 0;
    const failing = {
      get: async (key: string, opts?: R2GetOptions) => {
        if (++gets >= failingRead) throw new Error("R2 is down");
        return env.LEDGER.get(key, opts);
      },
    } as unknown as R2Bucket;
    const logged = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      const answer = await withTrainingTokens(env.DB, failing, e.name, raw, "sequence");
      const reader = (answer as ReadableStream<Uint8Array>).getReader();
      const dec = new TextDecoder();
      let text = "";
      let broke: unknown = null;
      for (;;) {
        const r = await reader.read().catch((err: unknown) => ((broke = err), null));
        if (r === null || r.done) break;
        text += dec.decode(r.value, { stream: true });
      }
      expect(String(broke)).toContain("R2 is down");
      expect(text).toContain(`"cursor":${raw.data.meta_info.cursor}`);
      expect(logged.mock.calls.some((c) => String(c[0]).startsWith("internal error (get_rollout_data, answer broken off)"))).toBe(true);
    } finally {
      logged.mockRestore();
    }
  });
});
