/**
 * A call whose record is stored whole is larger than a batch the shipper would otherwise make:
 * an agent resuming a long history (its gateway restarted mid-claim, the claim's history evicted,
 * or rewritten) sends it all at once, and with capture `tokens` its prompt ids alone take 5.3
 * bytes a token. The real Worker (Miniflare, D1 and R2), the real agent and gateway, and the
 * vLLM-shaped token model: such a call is recorded whole, sent as a batch of its own, and its
 * trajectory has the tokens, so the calls after it continue a known sequence.
 */
import { describe, expect, it } from "vitest";
import { RECORD_BODY_CAP_BYTES } from "../../src/ledger/recorder";
import { ledgerWorld } from "./ledger-world";
import { promptIds, startTokenModel } from "./token-model";

const world = ledgerWorld("large-record-e2e", () => startTokenModel("vllm"), (vllm) => `${vllm.url}/v1`);

async function chat(claim: { openai_base_url: string; openai_api_key: string }, messages: Record<string, unknown>[]): Promise<Record<string, unknown>> {
  const res = await fetch(`${claim.openai_base_url}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${claim.openai_api_key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "policy", messages }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { choices: { message: Record<string, unknown> }[] }).choices[0]!.message;
}

describe("a call record larger than a batch", () => {
  it("records a 300k-token history whole with its ids, read back exactly, and the next call as its delta", async () => {
    const { claim, recorded } = await world.claimed({ engine: "large", capture: "tokens", agent: { tokenDialect: "vllm" }, weightVersion: 2, discardEpisodeTimeout: 120 });
    // A file read earlier in the episode: one token a character in the model's tokenizer.
    const file = Array.from({ length: 3_000 }, (_, i) => `line ${String(i).padStart(5, "0")}: ${"abcdefghij".repeat(9)}`).join("\n");
    const history: Record<string, unknown>[] = [
      { role: "system", content: "You edit code." },
      { role: "user", content: `Here is the file:\n${file}` },
      { role: "assistant", content: "Read it." },
      { role: "user", content: "What is on line 7?" },
    ];
    const ids = promptIds(history as never);
    expect(ids.length).toBeGreaterThan(300_000);
    // Packed (5.3 bytes an id) with the text, over the 1.5 MB the records were cut at.
    expect(Math.ceil((ids.length * 16) / 3) + file.length).toBeGreaterThan(1_500_000);
    expect(Math.ceil((ids.length * 16) / 3) + file.length).toBeLessThan(RECORD_BODY_CAP_BYTES);

    const answer = await chat(claim, history);
    const t1 = await recorded(1, "the first call's record");
    const first = t1.calls[0]!;
    expect(first.truncated).toBe(false);
    expect(first.messages).toEqual(history);
    expect(first.tokens?.prompt_ids).toEqual(ids);

    const next = [...history, answer, { role: "user", content: "And line 8?" }];
    await chat(claim, next);
    const t2 = await recorded(2, "the second call's record");
    expect(t2.calls.map((c) => [c.truncated, c.messages_splice, c.tokens?.splice])).toEqual([
      [false, "first", "first"],
      [false, "extends", "extends"],
    ]);
    expect(t2.calls[1]?.messages).toEqual(next);
    expect(t2.calls[1]?.tokens?.prompt_ids).toEqual(promptIds(next as never));
    // One sequence over both turns: the first call's tokens are known.
    expect(t2.training?.drift_at_call).toBeNull();
    expect(t2.training?.tokens.length).toBe(promptIds(next as never).length + (t2.calls[1]?.tokens?.completion_ids.length ?? 0));
  }, 120_000);
});
