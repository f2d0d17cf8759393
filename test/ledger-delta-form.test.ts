/**
 * The delta form against the whole form on claims drawn at random, in workerd with real D1 and
 * R2: calls on both endpoints (chat, /v1/completions with text or ids), prefixes naming any call
 * of the claim (before or after it, itself, one never stored, with counts past the named call's
 * length), truncated calls, uncaptured stubs, calls whose batch never arrived, tools from the
 * prefix, failed calls. Every trajectory read in the delta form must come back whole (made whole
 * by wholeTrajectory) equal to the whole form, and the export's lines likewise. Drawn with
 * fast-check: a failure is shrunk and printed with its seed and path, which FUZZ_SEED and
 * FUZZ_PATH replay (as test/fuzz does; CI fixes the seed).
 */
import { env } from "cloudflare:workers";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { LedgerClient, wholeTrajectory } from "../src/client";
import type { CallRecord, Trajectory } from "../src/protocol/ledger";
import { packFloats, packInts } from "../src/protocol/packed";
import { batchOf, callRecord as call, checkingDeltaForm, postCalls as post, type LedgerClaim } from "./support/ledger";
import { advance, claimKeyFields, createEngine, endBody, ORIGIN, rollingWith, workerFetch, type TestEngine } from "./support/harness";

const RUNS = 20;
const replay = env.FUZZ_SEED !== "" ? { seed: Number(env.FUZZ_SEED), ...(env.FUZZ_PATH !== "" ? { path: env.FUZZ_PATH } : {}) } : {};

type Draw = { int(n: number): number; chance(p: number): boolean; pick<T>(xs: readonly T[]): T };

/** fast-check's imperative draws (fc.gen): a failing claim is shrunk, and replays by its seed and path. */
function drawOf(g: fc.GeneratorValue): Draw {
  // Unbiased: fast-check's bias toward small values would make every `chance` near certain.
  const int = (n: number): number => g((max: number) => fc.noBias(fc.integer({ min: 0, max })), n - 1);
  return { int, chance: (p) => int(100) < p * 100, pick: (xs) => xs[int(xs.length)] as (typeof xs)[number] };
}

const TEXTS = ["ok", "", "2+2 😀", "é\u0301", "line\nbreak", "tool output"];

/**
 * One claim's calls, drawn in order. Mostly as a gateway stores them, each continuing the call
 * before it by some of its history (so the reader can rebuild it: lengths are tracked while
 * known); sometimes naming any call of the claim, one never recorded, or past its length.
 */
function drawClaim(d: Draw, c: LedgerClaim): { posted: CallRecord[] } {
  const n = 2 + d.int(9);
  const ids = Array.from({ length: n }, (_, i) => `${c.episode}-${i}`);
  // What each call's successor continues, as far as it is known: messages and answer, prompt ids
  // and completion ids, a /v1/completions prompt and the answer's text (its length in UTF-16 units).
  const known: { messages: number | null; ids: number | null; text: number | null; idsPrompt: number | null }[] = [];
  const ref = (length: number | null): { call_id: string; count: number } | null => {
    const i = known.length;
    if (i > 0 && length !== null && d.chance(0.85)) return { call_id: ids[i - 1] as string, count: d.int(length + 1) };
    if (d.chance(0.7)) return null;
    return { call_id: d.chance(0.15) ? "never-recorded" : d.pick(ids), count: d.int(8) };
  };
  const message = () => (d.chance(0.5) ? { role: d.pick(["user", "tool", "assistant"]), content: d.pick(TEXTS) } : { role: "user", content: [{ type: "text", text: d.pick(TEXTS) }] });
  // A claim mostly keeps to one endpoint and one kind of /v1/completions prompt, as agents do.
  const ENDPOINTS = ["/v1/chat/completions", "/v1/completions"] as const;
  const usual = d.pick(ENDPOINTS);
  const textPrompts = d.chance(0.5);
  const all = ids.map((id, i) => {
    const before = known[i - 1];
    const endpoint = d.chance(0.85) ? usual : d.pick(ENDPOINTS);
    const someIds = () => Array.from({ length: d.int(4) }, () => d.int(50));
    const stub = d.chance(0.08);
    const failed = !stub && d.chance(0.1);
    const truncated = !stub && d.chance(0.08);
    const messages = Array.from({ length: d.int(3) }, message);
    const answer = d.chance(0.8) ? { role: "assistant", content: d.chance(0.8) ? d.pick(TEXTS) : null } : null;
    const prefix = ref(before?.messages ?? null);
    const added = someIds();
    const completion = someIds();
    const promptPrefix = ref(before?.ids ?? null);
    const tokens = d.chance(0.6) ? { prompt_prefix: promptPrefix, prompt_ids: packInts(added), completion_ids: packInts(completion), completion_logprobs: packFloats(completion.map(() => -0.5)) } : null;
    const textPrompt = d.chance(0.9) ? textPrompts : !textPrompts;
    // A prompt of no ids is no prompt (splice.ts sequencePrompt): one whole has some.
    const rest = textPrompt ? d.pick(TEXTS) : [d.int(50), ...someIds()];
    const promptRef = endpoint !== "/v1/completions" ? null : ref(textPrompt ? (before?.text ?? null) : (before?.idsPrompt ?? null));
    const prompt = endpoint !== "/v1/completions" ? undefined : promptRef === null ? rest : { prefix: promptRef, rest };
    // What it gives its successor, when the reader can rebuild it (a call it continues is the one before, whole).
    const whole = !stub && !truncated;
    const from = (r: { call_id: string; count: number } | null, length: number | null | undefined) => (r === null ? 0 : r.call_id === ids[i - 1] && length != null && r.count <= length ? r.count : null);
    const msgs = from(prefix, before?.messages);
    const seq = from(promptPrefix, before?.ids);
    const answered = answer?.content;
    const txt = textPrompt ? from(promptRef, before?.text) : null;
    const idp = textPrompt ? null : from(promptRef, before?.idsPrompt);
    known.push({
      messages: whole && msgs !== null ? msgs + messages.length + (answer === null ? 0 : 1) : null,
      ids: whole && tokens !== null && seq !== null ? seq + added.length + completion.length : null,
      text: whole && endpoint === "/v1/completions" && txt !== null ? txt + (rest as string).length + (typeof answered === "string" ? answered.length : 0) : null,
      idsPrompt: whole && endpoint === "/v1/completions" && idp !== null ? idp + (rest as number[]).length + (tokens === null ? 0 : completion.length) : null,
    });
    const r = call(c, {
      endpoint,
      truncated,
      status: failed ? 502 : 200,
      error: failed ? "upstream_stream_broken" : null,
      ...(stub ? { capture: "off" as const, usage: null } : {}),
      body: stub
        ? { params: {}, uncaptured: true }
        : {
            params: { temperature: 1, ...(prompt === undefined ? {} : { prompt }) },
            tools: d.chance(0.3) ? [{ type: "function", function: { name: `t${i}` } }] : null,
            tools_from_prefix: d.chance(0.5),
            prefix,
            messages,
            answer,
            tokens,
          },
    });
    return { ...r, call_id: id };
  });
  // Some batches never arrive: their calls are named but not held (a claim keeps one, to be read).
  const posted = all.filter(() => !d.chance(0.1));
  return { posted: posted.length > 0 ? posted : all.slice(0, 1) };
}

/** A claim of a new episode of `e`, registered and claimed for this run. */
async function claimNew(e: TestEngine, k: number): Promise<LedgerClaim> {
  const [episode] = await rollingWith(e, 1, { prefix: `run${k}` });
  const c = await e.as("client").claimEpisode({ client_uuid: `c${k}`, discard_episode_timeout: 600 });
  expect(c.success).toBe(true);
  const key = await claimKeyFields(c.openai_api_key);
  expect(key.episode_uuid).toBe(`${episode}`);
  return { episode: key.episode_uuid, fence: key.fence, client: `c${k}` };
}

describe("the delta form, on claims drawn at random", () => {
  it("makes whole again exactly the whole form, read one at a time and exported", async () => {
    const e = await createEngine();
    const ledger = checkingDeltaForm(new LedgerClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens.viewer, fetch: workerFetch }));
    const seen = { messages_from: false, prompt_ids_from: false, prompt_from: false, prefix_missing: false };
    let k = 0;
    await fc.assert(
      fc.asyncProperty(fc.gen(), async (g) => {
        const c = await claimNew(e, k++);
        const { posted } = drawClaim(drawOf(g), c);
        expect((await post(e, batchOf(posted))).status).toBe(200);
        // checkingDeltaForm reads both forms, and throws unless the delta form made whole is the whole form.
        const t = await ledger.trajectory(c.episode, c.fence, { form: "delta" });
        expect(t.calls.map((x) => x.call_id)).toEqual(posted.map((r) => r.call_id));
        expect((await e.as("client").endEpisode(endBody(c.client, c.episode, 1))).success).toBe(true);
        for (const x of t.calls) {
          seen.messages_from ||= x.messages_from != null;
          seen.prompt_ids_from ||= x.tokens?.prompt_from != null;
          seen.prompt_from ||= x.prompt_from != null;
          seen.prefix_missing ||= x.prefix_missing;
        }
      }),
      { numRuns: RUNS, ...replay },
    );
    // Not vacuous: the draws named calls the reader rebuilds, on each list, and some it cannot.
    expect(seen).toEqual({ messages_from: true, prompt_ids_from: true, prompt_from: true, prefix_missing: true });
    await advance(e, 2000);
    const whole: Trajectory[] = [];
    for await (const t of ledger.export()) whole.push(t);
    const delta: Trajectory[] = [];
    for await (const t of ledger.export({ form: "delta" })) delta.push(t);
    expect(whole).toHaveLength(k);
    expect(delta.map(wholeTrajectory)).toEqual(whole);
  });
});
