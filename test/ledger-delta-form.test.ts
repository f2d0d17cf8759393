/**
 * The delta form against the whole form on claims drawn at random, in workerd with real D1 and
 * R2: calls on both endpoints (chat, /v1/completions with text or ids), prefixes naming any call
 * of the claim (before or after it, itself, one never stored, with counts past the named call's
 * length), truncated calls, uncaptured stubs, calls whose batch never arrived, tools from the
 * prefix, failed calls. Every trajectory read in the delta form must come back whole (made whole
 * by wholeTrajectory) equal to the whole form, and the export's lines likewise; and the whole
 * form must give back each list as the draw made it, wherever the draw knows it. Drawn with
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

/** A call whole, as the test drew it: what the exchange must give back (undefined where the draw does not tell). */
type Expected = { messages?: unknown[]; promptIds?: number[]; prompt?: string | number[] };

/**
 * One claim's calls, drawn in order. Mostly as a gateway stores them, each continuing the call
 * before it by some of its history; sometimes naming any call of the claim, one never recorded,
 * or past its length. While a call's lists follow from the ones before it, the draw keeps them
 * whole, by plain slicing and concatenation: the expected answer, apart from the exchange's code.
 */
function drawClaim(d: Draw, c: LedgerClaim): { posted: CallRecord[]; expected: Map<string, Expected> } {
  const n = 2 + d.int(9);
  const ids = Array.from({ length: n }, (_, i) => `${c.episode}-${i}`);
  // What each call's successor continues, when the draw knows it whole: messages then answer,
  // prompt ids then completion ids, a /v1/completions prompt then its answer's text or completion ids.
  type Next = { messages: unknown[] | null; ids: number[] | null; text: string | null; idsPrompt: number[] | null };
  const known: Next[] = [];
  // A call that names a later one may close a cycle across lists (its tokens naming a call whose
  // messages name it), which the exchange reads as not known (rebuild.ts) and no recorder makes:
  // the draw's own expectations are left out of such a claim.
  let forward = false;
  const ref = (length: number | null): { call_id: string; count: number } | null => {
    const i = known.length;
    if (i > 0 && length !== null && d.chance(0.85)) return { call_id: ids[i - 1] as string, count: d.int(length + 1) };
    if (d.chance(0.7)) return null;
    const named = d.int(ids.length + 1);
    forward ||= named >= i && named < ids.length;
    return { call_id: named === ids.length ? "never-recorded" : (ids[named] as string), count: d.int(8) };
  };
  const message = () => (d.chance(0.5) ? { role: d.pick(["user", "tool", "assistant"]), content: d.pick(TEXTS) } : { role: "user", content: [{ type: "text", text: d.pick(TEXTS) }] });
  // A claim mostly keeps to one endpoint and one kind of /v1/completions prompt, as agents do.
  const ENDPOINTS = ["/v1/chat/completions", "/v1/completions"] as const;
  const usual = d.pick(ENDPOINTS);
  const textPrompts = d.chance(0.5);
  const posted: CallRecord[] = [];
  const expected = new Map<string, Expected>();
  ids.forEach((id, i) => {
    const before = known[i - 1];
    const endpoint = d.chance(0.85) ? usual : d.pick(ENDPOINTS);
    const someIds = () => Array.from({ length: d.int(4) }, () => d.int(50));
    const stub = d.chance(0.08);
    const failed = !stub && d.chance(0.1);
    const truncated = !stub && d.chance(0.08);
    // Its batch never arrives: named by the calls after it, but not held.
    const lost = i > 0 && d.chance(0.1);
    const messages = Array.from({ length: d.int(3) }, message);
    const answer = d.chance(0.8) ? { role: "assistant", content: d.chance(0.8) ? d.pick(TEXTS) : null } : null;
    const prefix = ref(before?.messages?.length ?? null);
    const added = someIds();
    const completion = someIds();
    const promptPrefix = ref(before?.ids?.length ?? null);
    const tokens = d.chance(0.6) ? { prompt_prefix: promptPrefix, prompt_ids: packInts(added), completion_ids: packInts(completion), completion_logprobs: packFloats(completion.map(() => -0.5)) } : null;
    const textPrompt = d.chance(0.9) ? textPrompts : !textPrompts;
    // A prompt of no ids is no prompt (splice.ts sequencePrompt): one whole has some.
    const rest = textPrompt ? d.pick(TEXTS) : [d.int(50), ...someIds()];
    const completions = endpoint === "/v1/completions";
    const promptRef = !completions ? null : ref((textPrompt ? before?.text : before?.idsPrompt)?.length ?? null);
    const prompt = !completions ? undefined : promptRef === null ? rest : { prefix: promptRef, rest };
    // The call whole, when it continues the call before it (or nothing) and that one is known whole.
    function whole<T extends string | unknown[]>(r: { call_id: string; count: number } | null, base: T | null | undefined, own: T): T | null {
      if (r === null) return own;
      if (r.call_id !== ids[i - 1] || base == null || r.count > base.length) return null;
      return (typeof own === "string" ? (base as string).slice(0, r.count) + own : [...(base as unknown[]).slice(0, r.count), ...own]) as T;
    }
    const ms = whole(prefix, before?.messages, messages);
    const ps = tokens === null ? null : whole(promptPrefix, before?.ids, added);
    const text = completions && textPrompt ? whole(promptRef, before?.text, rest as string) : null;
    const idsPrompt = completions && !textPrompt ? whole(promptRef, before?.idsPrompt, rest as number[]) : null;
    if (!stub && !lost) expected.set(id, { ...(ms === null ? {} : { messages: ms }), ...(ps === null ? {} : { promptIds: ps }), ...(text ?? idsPrompt) === null ? {} : { prompt: (text ?? idsPrompt) as string | number[] } });
    // What its successor continues: nothing known of a stub, a truncated call or one never held.
    const held = !stub && !truncated && !lost;
    const answered = answer?.content;
    known.push({
      messages: held && ms !== null ? [...ms, ...(answer === null ? [] : [answer])] : null,
      ids: held && ps !== null ? [...ps, ...completion] : null,
      text: held && text !== null ? text + (typeof answered === "string" ? answered : "") : null,
      idsPrompt: held && idsPrompt !== null ? [...idsPrompt, ...(tokens === null ? [] : completion)] : null,
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
    if (!lost) posted.push({ ...r, call_id: id });
  });
  return { posted, expected: forward ? new Map() : expected };
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
    let checked = 0;
    await fc.assert(
      fc.asyncProperty(fc.gen(), async (g) => {
        const c = await claimNew(e, k++);
        const { posted, expected } = drawClaim(drawOf(g), c);
        expect((await post(e, batchOf(posted))).status).toBe(200);
        // checkingDeltaForm reads both forms, and throws unless the delta form made whole is the whole form.
        const t = await ledger.trajectory(c.episode, c.fence, { form: "delta" });
        expect(t.calls.map((x) => x.call_id)).toEqual(posted.map((r) => r.call_id));
        // The whole form against the draw's own: each list the draw knows whole comes back so.
        for (const x of (await ledger.trajectory(c.episode, c.fence)).calls) {
          const want = expected.get(x.call_id);
          if (want === undefined) continue;
          if (want.messages !== undefined) expect(x.messages, x.call_id).toEqual(want.messages);
          if (want.promptIds !== undefined) expect(x.tokens?.prompt_ids, x.call_id).toEqual(want.promptIds);
          if (want.prompt !== undefined) expect(x.params["prompt"], x.call_id).toEqual(want.prompt);
          checked += Number(want.messages !== undefined) + Number(want.promptIds !== undefined) + Number(want.prompt !== undefined);
        }
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
    // Not vacuous: the draws named calls the reader rebuilds, on each list, and some it cannot
    // (a replay of one failing draw, FUZZ_PATH, need not).
    if (!("path" in replay)) {
      expect(seen).toEqual({ messages_from: true, prompt_ids_from: true, prompt_from: true, prefix_missing: true });
      expect(checked).toBeGreaterThan(5);
    }
    await advance(e, 2000);
    const whole: Trajectory[] = [];
    for await (const t of ledger.export()) whole.push(t);
    const delta: Trajectory[] = [];
    for await (const t of ledger.export({ form: "delta" })) delta.push(t);
    expect(whole).toHaveLength(k);
    expect(delta.map(wholeTrajectory)).toEqual(whole);
  });
});
