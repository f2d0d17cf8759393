/**
 * SGLang's usage details as the ledger records them: SGLang says a thinking model's reasoning
 * tokens at the top of its usage (UsageInfo.reasoning_tokens, in
 * sglang/srt/entrypoints/openai/protocol.py and usage_processor.py), not under OpenAI's
 * completion_tokens_details, which SGLang fills with speculative decoding's counts only.
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { bodyText } from "../support/http-server";
import { recordingGatewayOnModel } from "./recording-gateway";

// SGLang's usage of a thinking model's answer with --enable-cache-report and a reasoning parser.
const SGLANG_USAGE = { prompt_tokens: 12, total_tokens: 42, completion_tokens: 30, prompt_tokens_details: { cached_tokens: 8 }, reasoning_tokens: 20 };

const m = recordingGatewayOnModel(
  "sglang-usage",
  async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    await bodyText(req);
    const message = { role: "assistant", content: "4", reasoning_content: "2+2 is 4." };
    res
      .writeHead(200, { "content-type": "application/json" })
      .end(JSON.stringify({ id: "r", object: "chat.completion", created: 1, model: "policy", choices: [{ index: 0, message, logprobs: null, finish_reason: "stop" }], usage: SGLANG_USAGE }));
  },
  "sglang",
);

describe("SGLang's usage details", () => {
  it("records the reasoning tokens SGLang gives at the top of its usage", async () => {
    const call = m.call(`ep-${randomUUID()}`, { model: "policy", messages: [{ role: "user", content: "2+2?" }] }, "messages");
    expect((await m.post(call)).status).toBe(200);
    expect((await m.recordOf(call)).usage).toEqual({ prompt_tokens: 12, completion_tokens: 30, cached_tokens: 8, reasoning_tokens: 20 });
  });
});
