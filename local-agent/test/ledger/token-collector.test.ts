/**
 * Token ids and logprobs read from an upstream's answer (ledger/token-fields.ts): one logprob a
 * completion token, in order. An entry without a numeric logprob (vLLM's chat `content[]`,
 * SGLang's `output_token_logprobs`) was skipped, so every later logprob was paired with the token
 * before it; it now counts 0 in its place, as /v1/completions' `token_logprobs` by position do.
 */
import { describe, expect, it } from "vitest";
import { TokenCollector } from "../../src/ledger/token-fields";

describe("token collector", () => {
  it("keeps vLLM chat logprobs in step with the tokens when an entry has none", () => {
    const t = new TokenCollector();
    t.read({ prompt_token_ids: [1, 2], choices: [{ index: 0, token_ids: [10, 11, 12], logprobs: { content: [{ token: "a", logprob: -0.5 }, { token: "b", logprob: null }, { token: "c", logprob: -0.25 }] } }] });
    expect(t.result()).toEqual({ prompt: [1, 2], completion: [10, 11, 12], logprobs: [-0.5, 0, -0.25] });
  });

  it("keeps SGLang's output logprobs in step with the tokens when an entry has none", () => {
    const t = new TokenCollector();
    t.read({ prompt_token_ids: [1], choices: [{ index: 0, meta_info: { output_token_logprobs: [[-0.5, 10, "a"], [null, 11, "b"], [-0.25, 12, "c"]] } }] });
    expect(t.result()).toEqual({ prompt: [1], completion: [10, 11, 12], logprobs: [-0.5, 0, -0.25] });
  });
});
