/**
 * The trajectory ledger end to end: the real Worker (Miniflare, D1 and R2), the real agent and its
 * gateway, and an inference server answering token ids and logprobs in vLLM's exact shapes. A
 * client claims an episode and talks to the policy through the relay with its per-claim key,
 * three turns with a tool call (streamed and whole); the trajectory read back from the exchange
 * has the exact tokens, loss mask and logprobs the server produced. A server that re-tokenizes
 * the history drifts, and the trajectory says at which call; a stream that broke and was retried
 * stays out of the training sequence; concurrent calls of one claim, stored as deltas of whichever
 * finished last, read back whole. A /v1/completions conversation, stored as deltas of its prompt
 * (text, or token ids), reads back with each call's whole prompt, in the export too. The operator
 * switching capture mid-claim (off, messages, tokens) never splices a completion in as prompt.
 */
import { describe, expect, it } from "vitest";
import { bodyText, serveHttp } from "../support/http-server";
import { waitUntil } from "../support/wait";
import type { CaptureMode } from "../../../src/protocol/ledger";
import { ledgerWorld } from "./ledger-world";
import { logprobOf, startTokenModel, type Served } from "./token-model";

const world = ledgerWorld("ledger-e2e", () => startTokenModel("vllm"), (vllm) => `${vllm.url}/v1`);
const { cleanups } = world;

/** A fresh engine capturing tokens, its agent's gateway in front of the vLLM-shaped server (unless told otherwise), one claim. */
const setup = (opts: { upstream?: string; capture?: "messages" | "tokens"; episodeType?: "train" | "eval" } = {}) =>
  world.claimed({ engine: "ledger", capture: opts.capture ?? "tokens", upstream: opts.upstream, agent: { tokenDialect: "vllm" }, weightVersion: 7, discardEpisodeTimeout: 60, episodeType: opts.episodeType });

type Chat = { message: Record<string, unknown>; raw: Record<string, unknown> | null };

/** One call through the relay as an OpenAI client makes it, whole or streamed (the deltas assembled). */
async function chat(claim: { openai_base_url: string; openai_api_key: string }, body: Record<string, unknown>): Promise<Chat> {
  const res = await fetch(`${claim.openai_base_url}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${claim.openai_api_key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  expect(res.status, text).toBe(200);
  if (body["stream"] !== true) {
    const raw = JSON.parse(text) as { choices: { message: Record<string, unknown> }[] };
    return { message: raw.choices[0]!.message, raw };
  }
  let content = "";
  const calls: Record<string, unknown>[] = [];
  for (const event of text.split("\n\n")) {
    const data = event.replace(/^data: /, "").trim();
    if (data === "" || data === "[DONE]" || data.startsWith(":")) continue;
    const chunk = JSON.parse(data) as Record<string, unknown>;
    // What the client did not ask for never reaches it, streamed or whole.
    expect(chunk).not.toHaveProperty("prompt_token_ids");
    const delta = ((chunk["choices"] as Record<string, unknown>[])[0]?.["delta"] ?? {}) as { content?: string; tool_calls?: Record<string, unknown>[] };
    content += delta.content ?? "";
    // Tool calls arrive in pieces: merged by index, as OpenAI clients do.
    for (const c of delta.tool_calls ?? []) {
      const i = Number(c["index"] ?? 0);
      const piece = (c["function"] ?? {}) as { name?: string; arguments?: string };
      const into = (calls[i] ??= { id: c["id"], type: "function", function: { name: "", arguments: "" } }) as { id?: unknown; function: { name: string; arguments: string } };
      into.id ??= c["id"];
      into.function.name += piece.name ?? "";
      into.function.arguments += piece.arguments ?? "";
    }
  }
  return { message: { role: "assistant", content, ...(calls.length ? { tool_calls: calls } : {}) }, raw: null };
}

const tools = [{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: { q: { type: "string" } } } } }];

describe("trajectory ledger, end to end", () => {
  it("records three relayed turns with a tool call, and gives back the exact tokens, loss mask and logprobs", async () => {
    const { claim, ledger, end, recorded, role } = await setup();
    const messages: Record<string, unknown>[] = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "tool:weather" },
    ];
    const first = await chat(claim, { model: "policy", messages, tools, stream: true });
    const call = (first.message["tool_calls"] as { id: string; function: { name: string; arguments: string } }[] | undefined)?.[0];
    expect(call?.function).toEqual({ name: "lookup", arguments: JSON.stringify({ q: "weather" }) });
    messages.push({ role: "assistant", content: null, tool_calls: [{ id: call?.id, type: "function", function: call?.function }] });
    messages.push({ role: "tool", tool_call_id: call?.id, content: "sunny" });
    const second = await chat(claim, { model: "policy", messages, tools });
    expect(second.raw).not.toHaveProperty("prompt_token_ids");
    expect((second.raw?.["choices"] as Record<string, unknown>[])[0]).not.toHaveProperty("token_ids");
    messages.push(second.message);
    messages.push({ role: "user", content: "thanks" });
    const third = await chat(claim, { model: "policy", messages, tools, logprobs: true });
    // The client asked for logprobs this time, and gets them.
    expect((third.raw?.["choices"] as Record<string, unknown>[])[0]?.["logprobs"]).toBeDefined();

    expect((await end()).success).toBe(true);
    // The agent ships its records within a second; the engine's outbox writes the trajectory row.
    const v = ledger("viewer");
    const t = await recorded(3, "the trajectory with its three calls", { ended: true });

    expect(t.calls.map((c) => c.messages_splice)).toEqual(["first", "extends", "extends"]);
    expect(t.calls.map((c) => c.tokens?.splice)).toEqual(["first", "extends", "extends"]);
    expect(t.calls.map((c) => c.weight_version)).toEqual([7, 7, 7]);
    expect(t.calls[0]?.stream).toBe(true);
    expect(t.calls[2]?.messages).toEqual(messages);
    expect(t.calls[2]?.tools).toEqual(tools);

    // Exactly what the server served: the first prompt, then each completion and the prompt tokens between turns.
    const served = world.model.served.slice(-3);
    expect(served).toHaveLength(3);
    const [s1, s2, s3] = served as [(typeof served)[0], (typeof served)[0], (typeof served)[0]];
    const between = (s: typeof s1, before: number[]) => s.prompt.slice(before.length);
    const upTo2 = [...s1.prompt, ...s1.completion];
    const upTo3 = [...s2.prompt, ...s2.completion];
    expect(s2.prompt.slice(0, upTo2.length)).toEqual(upTo2);
    const tokens = [...s1.prompt, ...s1.completion, ...between(s2, upTo2), ...s2.completion, ...between(s3, upTo3), ...s3.completion];
    const mask = [...s1.completion.map(() => 1), ...between(s2, upTo2).map(() => 0), ...s2.completion.map(() => 1), ...between(s3, upTo3).map(() => 0), ...s3.completion.map(() => 1)];
    const lp = (ids: number[]) => ids.map((id) => Math.fround(logprobOf(id)));
    const logprobs = [...lp(s1.completion), ...between(s2, upTo2).map(() => 0), ...lp(s2.completion), ...between(s3, upTo3).map(() => 0), ...lp(s3.completion)];
    expect(t.training).toMatchObject({ tokens, loss_mask: mask, rollout_log_probs: logprobs, response_length: tokens.length - s1.prompt.length, drift_at_call: null });

    // The same trajectory in the export, and in the list with its tokens counted.
    const exported: string[] = [];
    for await (const x of v.export()) exported.push(`${x.episode_uuid}:${x.calls.length}:${x.training?.tokens.length}`);
    expect(exported).toEqual([`ep-1:3:${tokens.length}`]);
    const listed = (await v.list()).trajectories[0];
    expect(listed).toMatchObject({ episode_uuid: "ep-1", outcome: "ended", reward: 1, calls: 3 });
    expect(listed?.completion_tokens).toBe(s1.completion.length + s2.completion.length + s3.completion.length);

    // The agent's heartbeat tells the engine what became of the calls it recorded: all three stored, none waiting or lost.
    const hostLedger = await waitUntil(async () => {
      const l = (await role("viewer").overview()).agent.ledger;
      return l?.sent_calls === 3 ? l : null;
    }, "a heartbeat counting the three calls stored");
    expect(hostLedger).toEqual({ queued_calls: 0, queued_bytes: 0, oldest_queued_ms: null, sent_calls: 3, duplicate_calls: 0, dropped_calls: 0, refused_calls: 0, unrecorded_calls: 0 });
  });

  it("names an eval claim's type while it is live, as its ended trajectory does", async () => {
    const { claim, end, recorded } = await setup({ episodeType: "eval" });
    await chat(claim, { model: "policy", messages: [{ role: "user", content: "hello" }] });
    const live = await recorded(1, "the live claim's trajectory with its call");
    expect({ outcome: live.outcome, episode_type: live.episode_type }).toEqual({ outcome: null, episode_type: "eval" });
    expect((await end()).success).toBe(true);
    const ended = await recorded(1, "the ended trajectory", { ended: true });
    expect(ended.episode_type).toBe("eval");
  });

  it("says where the server re-tokenized the history, instead of splicing it", async () => {
    const { claim, recorded } = await setup();
    const messages: Record<string, unknown>[] = [{ role: "user", content: "hello" }];
    const first = await chat(claim, { model: "policy", messages });
    messages.push(first.message, { role: "user", content: "again" });
    // "drift" renders earlier assistant turns with an extra token, as a changed chat template would.
    await chat(claim, { model: "drift", messages });
    const t = await recorded(2, "the two calls recorded");
    expect(t.outcome).toBeNull();
    expect(t.calls.map((c) => c.messages_splice)).toEqual(["first", "extends"]);
    expect(t.calls.map((c) => c.tokens?.splice)).toEqual(["first", "rewritten"]);
    expect(t.training?.drift_at_call).toBe(1);
  });

  it("leaves a stream that broke mid-answer out of the training sequence, which the client's retry continues", async () => {
    const { claim, recorded } = await setup();
    const messages: Record<string, unknown>[] = [{ role: "user", content: "hello" }];
    const first = await chat(claim, { model: "policy", messages });
    messages.push(first.message, { role: "user", content: "again" });
    // "crash" breaks the stream off after its first token: answered 200, then an error; the client retries.
    const res = await fetch(`${claim.openai_base_url}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${claim.openai_api_key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "crash", messages, stream: true }),
    });
    expect(await res.text().catch((e: unknown) => String(e))).toContain("upstream_stream_broken");
    await chat(claim, { model: "policy", messages });
    const t = await recorded(3, "the three calls recorded");
    expect(t.calls.map((c) => [c.status, c.error?.split(":")[0] ?? null])).toEqual([
      [200, null],
      [200, "upstream_stream_broken"],
      [200, null],
    ]);
    const [s1, , s3] = world.model.served.slice(-3) as [Served, Served, Served];
    expect(s3.prompt.slice(0, s1.prompt.length + s1.completion.length)).toEqual([...s1.prompt, ...s1.completion]);
    expect(t.training).toMatchObject({ tokens: [...s3.prompt, ...s3.completion], drift_at_call: null });
  });
  it("gives back each /v1/completions call's whole prompt, stored as what it added to the call before", async () => {
    const { claim, recorded } = await setup();
    const prompts: string[] = [];
    let prompt = "You are an agent.";
    for (const observation of ["\nObservation: a door.", "\nObservation: a key.", "\nObservation: a room."]) {
      prompt += observation;
      prompts.push(prompt);
      const res = await fetch(`${claim.openai_base_url}/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${claim.openai_api_key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "policy", prompt, max_tokens: 16 }),
      });
      const text = await res.text();
      expect(res.status, text).toBe(200);
      prompt += (JSON.parse(text) as { choices: { text: string }[] }).choices[0]!.text;
    }
    const t = await recorded(3, "the three calls recorded");
    expect(t.calls.map((c) => c.params["prompt"])).toEqual(prompts);
    expect(t.calls.map((c) => c.params["max_tokens"])).toEqual([16, 16, 16]);
    expect(t.calls.map((c) => c.prefix_missing)).toEqual([false, false, false]);
  });

  it("gives back each /v1/completions call's whole prompt of token ids, byte for byte, in the trajectory and the export", async () => {
    const { claim, ledger, end, recorded } = await setup();
    const sent: string[] = [];
    let prompt: number[] = [7, 8, 9];
    for (const observation of [[11, 12], [13], [14, 15, 16]]) {
      prompt = [...prompt, ...observation];
      const body = JSON.stringify({ model: "policy", prompt, max_tokens: 16, return_token_ids: true });
      sent.push(body);
      const res = await fetch(`${claim.openai_base_url}/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${claim.openai_api_key}`, "content-type": "application/json" },
        body,
      });
      const text = await res.text();
      expect(res.status, text).toBe(200);
      prompt = [...prompt, ...(JSON.parse(text) as { choices: { token_ids: number[] }[] }).choices[0]!.token_ids];
    }
    const t = await recorded(3, "the three calls recorded");
    expect(t.calls.map((c) => JSON.stringify(c.params))).toEqual(sent);
    expect(t.calls.map((c) => c.prefix_missing)).toEqual([false, false, false]);
    expect(t.training).toMatchObject({ tokens: prompt, drift_at_call: null });

    expect((await end()).success).toBe(true);
    const exported = await waitUntil(async () => {
      const all = [];
      for await (const x of ledger("viewer").export()) all.push(x);
      return all.length === 1 ? all : null;
    }, "the ended claim exported");
    expect(exported[0]!.calls.map((c) => JSON.stringify(c.params))).toEqual(sent);
  });

  it("rebuilds a call stored as a delta of a concurrent call of its claim that was admitted after it", async () => {
    // Model "slow" is held until released, "bad" refused at once (400), any other answered at once.
    let release: () => void = () => undefined;
    let held = false;
    const upstream = await serveHttp(async (req, res) => {
      const r = JSON.parse(await bodyText(req)) as { model: string; messages: { content: string }[] };
      if (r.model === "bad") {
        res.writeHead(400, { "content-type": "application/json" }).end(JSON.stringify({ object: "error", message: "bad sampling parameter", type: "BadRequestError", param: null, code: 400 }));
        return;
      }
      if (r.model === "slow") {
        held = true;
        await new Promise<void>((resolve) => (release = resolve));
      }
      const choices = [{ index: 0, message: { role: "assistant", content: `echo: ${r.messages.at(-1)?.content ?? ""}` }, finish_reason: "stop" }];
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: "chatcmpl-x", object: "chat.completion", created: 1, model: r.model, choices, usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 } }));
    });
    cleanups.push(() => upstream.close());
    const { claim, recorded } = await setup({ upstream: `${upstream.origin}/v1`, capture: "messages" });
    cleanups.push(() => release());

    const messages: Record<string, unknown>[] = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "hello" },
    ];
    // A, admitted first, is held; B, the same history admitted second, fails first, and its record
    // is stored first: the gateway stores A as a delta of B (B's continuation is its messages).
    const a = chat(claim, { model: "slow", messages });
    await waitUntil(() => held, "the slow call to reach the upstream");
    const refused = await fetch(`${claim.openai_base_url}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${claim.openai_api_key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "bad", messages }),
    });
    expect(refused.status).toBe(400);
    await recorded(1, "B's record stored");
    release();
    const answerA = await a;
    // C continues A's answer.
    const messagesC = [...messages, answerA.message, { role: "user", content: "again" }];
    await chat(claim, { model: "policy", messages: messagesC });

    const t = await recorded(3, "the three calls recorded");
    expect(t.calls.map((c) => [c.model, c.status])).toEqual([
      ["slow", 200],
      ["bad", 400],
      ["policy", 200],
    ]);
    expect(t.calls.map((c) => c.prefix_missing)).toEqual([false, false, false]);
    expect(t.calls[0]?.messages).toEqual(messages);
    expect(t.calls[2]?.messages).toEqual(messagesC);
  });
});

describe("trajectory ledger, capture switched mid-claim", () => {
  /** A claim on an engine capturing `initial`; `capture` switches it; `recorded(n)` waits for the claim's n calls. */
  async function switching(initial: "messages" | "tokens", upstream?: string) {
    const { claim, ledger, recorded } = await setup({ capture: initial, ...(upstream === undefined ? {} : { upstream }) });
    const capture = (c: CaptureMode) => ledger("operator").configure({ capture: c });
    return { claim, capture, recorded: (n: number) => recorded(n, `${n} calls recorded`) };
  }

  /** Three turns; `before2`/`before3` run before the second/third. What the server served for each, and the last call's messages. */
  async function threeTurnsSwitching(claim: { openai_base_url: string; openai_api_key: string }, before2: () => Promise<unknown>, before3: () => Promise<unknown>) {
    const messages: Record<string, unknown>[] = [{ role: "user", content: "one" }];
    const from = world.model.served.length;
    messages.push((await chat(claim, { model: "policy", messages })).message, { role: "user", content: "two" });
    await before2();
    messages.push((await chat(claim, { model: "policy", messages })).message, { role: "user", content: "three" });
    await before3();
    await chat(claim, { model: "policy", messages });
    const served = world.model.served.slice(from);
    expect(served).toHaveLength(3);
    return { served: served as [Served, Served, Served], messages };
  }

  it("tokens, off, tokens: the call made with capture off is a stub that ends training, its completion never spliced in as prompt tokens", async () => {
    const { claim, capture, recorded } = await switching("tokens");
    const { served } = await threeTurnsSwitching(claim, () => capture("off"), () => capture("tokens"));
    const [s1, s2] = served;
    const t = await recorded(3);
    // The call with capture off: its status and times, nothing it asked or answered.
    expect(t.calls.map((c) => c.uncaptured)).toEqual([false, true, false]);
    expect(t.calls[1]).toMatchObject({ status: 200, error: null, messages: [], answer: null, tokens: null, usage: null, truncated: false, prefix_missing: false, messages_splice: "extends" });
    expect(t.calls[1]!.first_byte_at).not.toBeNull();
    // The third call's history is still checked against the first, the last call captured.
    expect(t.calls.map((c) => c.messages_splice)).toEqual(["first", "extends", "extends"]);
    // s2's completion sits right after s2's prompt in the third call's prompt: not in `training` as prompt tokens.
    const tokens = t.training?.tokens ?? [];
    const spliced = tokens.length > s2.prompt.length && tokens.slice(s2.prompt.length, s2.prompt.length + s2.completion.length).join() === s2.completion.join();
    expect({ drift_at_call: t.training?.drift_at_call, offCompletionSplicedAsPrompt: spliced }).toEqual({ drift_at_call: 1, offCompletionSplicedAsPrompt: false });
    expect(t.training?.tokens).toEqual([...s1.prompt, ...s1.completion]);
  });

  it("tokens, then off for the claim's last call: training does not read as the whole claim", async () => {
    const { claim, capture, recorded } = await switching("tokens");
    const messages: Record<string, unknown>[] = [{ role: "user", content: "one" }];
    messages.push((await chat(claim, { model: "policy", messages })).message, { role: "user", content: "two" });
    await capture("off");
    await chat(claim, { model: "policy", messages });
    const t = await recorded(2);
    expect(t.calls.map((c) => c.uncaptured)).toEqual([false, true]);
    expect(t.training?.drift_at_call, "a tail the ledger never saw reads as a complete claim").toBe(1);
  });

  it("messages, off, messages: the call after the gap is rebuilt whole, as the model saw it, beside the stub of the gap", async () => {
    const { claim, capture, recorded } = await switching("messages");
    const { messages } = await threeTurnsSwitching(claim, () => capture("off"), () => capture("messages"));
    const t = await recorded(3);
    expect(t.calls.map((c) => [c.uncaptured, c.prefix_missing])).toEqual([
      [false, false],
      [true, false],
      [false, false],
    ]);
    expect(t.calls[2]?.messages).toEqual(messages);
    expect(t.calls.map((c) => c.messages_splice)).toEqual(["first", "extends", "extends"]);
    expect(t.training ?? null).toBeNull();
  });

  it("messages, off, tokens: the calls before the first with token ids, the stub too, are its prompt", async () => {
    const { claim, capture, recorded } = await switching("messages");
    const { served, messages } = await threeTurnsSwitching(claim, () => capture("off"), () => capture("tokens"));
    const [, , s3] = served;
    const t = await recorded(3);
    expect(t.calls.map((c) => c.uncaptured)).toEqual([false, true, false]);
    expect(t.calls[2]?.messages).toEqual(messages);
    expect(t.training).toMatchObject({ tokens: [...s3.prompt, ...s3.completion], loss_mask: s3.completion.map(() => 1), drift_at_call: null });
  });

  it("tokens, messages, tokens: the call without ids ends training there", async () => {
    const { claim, capture, recorded } = await switching("tokens");
    const { served, messages } = await threeTurnsSwitching(claim, () => capture("messages"), () => capture("tokens"));
    const [s1] = served;
    const t = await recorded(3);
    expect(t.calls[2]?.messages).toEqual(messages);
    expect(t.calls.map((c) => c.tokens === null)).toEqual([false, true, false]);
    expect(t.training).toMatchObject({ tokens: [...s1.prompt, ...s1.completion], drift_at_call: 1 });
  });

  it("messages, tokens: earlier calls are the first token call's prompt", async () => {
    const { claim, capture, recorded } = await switching("messages");
    const { served, messages } = await threeTurnsSwitching(claim, () => capture("tokens"), async () => undefined);
    const [, s2, s3] = served;
    const t = await recorded(3);
    expect(t.calls[2]?.messages).toEqual(messages);
    expect(t.training).toMatchObject({ tokens: [...s3.prompt, ...s3.completion], drift_at_call: null });
    expect(t.training?.loss_mask).toEqual([...s2.completion.map(() => 1), ...s3.prompt.slice(s2.prompt.length + s2.completion.length).map(() => 0), ...s3.completion.map(() => 1)]);
  });

  it("tokens, messages: training stops at the first call without ids", async () => {
    const { claim, capture, recorded } = await switching("tokens");
    const { served } = await threeTurnsSwitching(claim, () => capture("messages"), async () => undefined);
    const [s1] = served;
    const t = await recorded(3);
    expect(t.training).toMatchObject({ tokens: [...s1.prompt, ...s1.completion], drift_at_call: 1 });
  });

  it("tokens, an upstream 5xx between two recorded calls and the client's retry: training continues, nothing spliced", async () => {
    const upstream = await serveHttp(async (req, res) => {
      const text = await bodyText(req);
      const r = JSON.parse(text) as { model: string };
      if (r.model === "down") {
        res.writeHead(503, { "content-type": "application/json" }).end(JSON.stringify({ object: "error", message: "overloaded", type: "ServiceUnavailable", code: 503 }));
        return;
      }
      const path = (req.url ?? "").replace(/^\/v1/, "");
      const got = await fetch(`${world.model.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: text });
      res.writeHead(got.status, { "content-type": got.headers.get("content-type") ?? "application/json" }).end(Buffer.from(await got.arrayBuffer()));
    });
    cleanups.push(() => upstream.close());
    const { claim, recorded } = await switching("tokens", `${upstream.origin}/v1`);
    const messages: Record<string, unknown>[] = [{ role: "user", content: "one" }];
    const from = world.model.served.length;
    messages.push((await chat(claim, { model: "policy", messages })).message, { role: "user", content: "two" });
    const failed = await fetch(`${claim.openai_base_url}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${claim.openai_api_key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "down", messages }),
    });
    expect(failed.status).toBeGreaterThanOrEqual(500);
    await failed.text();
    messages.push((await chat(claim, { model: "policy", messages })).message, { role: "user", content: "three" });
    await chat(claim, { model: "policy", messages });
    const [s1, s2, s3] = world.model.served.slice(from) as [Served, Served, Served];
    const t = await recorded(4);
    expect(t.calls.map((c) => c.status >= 500)).toEqual([false, true, false, false]);
    expect(t.calls.map((c) => c.prefix_missing)).toEqual([false, false, false, false]);
    expect(t.calls[3]?.messages).toEqual(messages);
    const upTo2 = [...s1.prompt, ...s1.completion];
    const upTo3 = [...s2.prompt, ...s2.completion];
    expect(t.training).toMatchObject({
      tokens: [...s1.prompt, ...s1.completion, ...s2.prompt.slice(upTo2.length), ...s2.completion, ...s3.prompt.slice(upTo3.length), ...s3.completion],
      drift_at_call: null,
    });
  });
});
