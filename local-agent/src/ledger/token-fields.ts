/**
 * Token ids and logprobs from an HTTP upstream, for capture `tokens`. vLLM and SGLang each
 * answer them when asked, in their own fields (checked against their OpenAI-compatible servers):
 *
 * - vLLM: request `return_token_ids: true` and `logprobs` (true for chat, a count for
 *   /v1/completions). A chat answer has a top-level `prompt_token_ids`, a completion's choice its
 *   own; each choice has `token_ids` and `logprobs` (`content[].logprob` for chat,
 *   `token_logprobs` for completions). A stream sends the prompt ids in its first chunk and each
 *   chunk's own token ids and logprob entries.
 * - SGLang (0.5.13 on): request `logprobs`, `return_prompt_token_ids: true` and
 *   `return_meta_info: true`; each choice has `prompt_token_ids` and
 *   `meta_info.output_token_logprobs`, a list of `[logprob, token_id, text?]` (older builds:
 *   `{logprob, token_id}`). It refuses a stream with prompt ids, so a streamed call is asked
 *   whole and answered to the client as a stream by the gateway.
 *
 * What the client did not ask for is taken out of the answer before it goes to the client.
 */
import type { TokenDialect } from "../../../src/protocol/ledger";
import type { RelayEndpoint } from "../../../src/protocol/relay";
import { isRecord } from "../../../src/protocol/record";
import { isTokenIds } from "../../../src/ledger/splice";

type Obj = Record<string, unknown>;

/** What the client itself asked for, so that its answer keeps those fields. */
export type ClientAsked = { logprobs: boolean; tokenIds: boolean; metaInfo: boolean };

export function clientAsked(dialect: TokenDialect, endpoint: RelayEndpoint, request: Obj): ClientAsked {
  const logprobs = endpoint === "/v1/completions" ? typeof request["logprobs"] === "number" : request["logprobs"] === true;
  if (dialect === "vllm") return { logprobs, tokenIds: request["return_token_ids"] === true, metaInfo: false };
  return { logprobs, tokenIds: request["return_prompt_token_ids"] === true, metaInfo: request["return_meta_info"] === true };
}

/**
 * The request as the upstream is asked it. `logprobs` for /v1/completions is a count of top
 * alternatives: the client's own, else 1 (the sampled token's logprob comes with any count).
 */
export function tokenRequest(dialect: TokenDialect, endpoint: RelayEndpoint, request: Obj): Obj {
  const logprobs = endpoint === "/v1/completions" ? (typeof request["logprobs"] === "number" ? request["logprobs"] : 1) : true;
  if (dialect === "vllm") return { ...request, return_token_ids: true, logprobs };
  const { stream_options: _options, ...rest } = request;
  return { ...rest, stream: false, logprobs, return_prompt_token_ids: true, return_meta_info: true };
}

/** SGLang cannot stream with prompt ids: the gateway asks whole and streams to the client itself. */
export function upstreamStreams(dialect: TokenDialect, request: Obj): boolean {
  return dialect === "vllm" && request["stream"] === true;
}

/** Token data gathered from an answer, whole or chunk by chunk. */
export class TokenCollector {
  prompt: number[] | null = null;
  readonly completion: number[] = [];
  readonly logprobs: number[] = [];

  /** Reads a whole answer or one stream chunk (choice 0: the ledger records one answer per call). */
  read(answer: Obj): void {
    const choice = firstChoice(answer);
    const prompt = choice?.["prompt_token_ids"] ?? answer["prompt_token_ids"];
    if (this.prompt === null && isTokenIds(prompt)) this.prompt = prompt;
    if (choice === null) return;
    const meta = isRecord(choice["meta_info"]) ? choice["meta_info"] : isRecord(answer["meta_info"]) ? answer["meta_info"] : null;
    const sglang = meta !== null && Array.isArray(meta["output_token_logprobs"]) ? meta["output_token_logprobs"] : null;
    if (sglang !== null) {
      for (const entry of sglang) {
        const [logprob, id] = Array.isArray(entry) ? [entry[0], entry[1]] : isRecord(entry) ? [entry["logprob"], entry["token_id"]] : [null, null];
        // A token without its logprob gets 0, as by position below: skipped, every later logprob would be a token early.
        if (typeof id !== "number") continue;
        this.completion.push(id);
        this.logprobs.push(typeof logprob === "number" ? logprob : 0);
      }
      return;
    }
    // A loop, not push(...ids): a long completion would overflow the argument stack.
    if (isTokenIds(choice["token_ids"])) for (const id of choice["token_ids"]) this.completion.push(id);
    const lp = choice["logprobs"];
    if (!isRecord(lp)) return;
    if (Array.isArray(lp["content"])) {
      // One entry a token: one without a numeric logprob gets 0 rather than shifting the rest.
      for (const e of lp["content"]) this.logprobs.push(isRecord(e) && typeof e["logprob"] === "number" ? e["logprob"] : 0);
    } else if (Array.isArray(lp["token_logprobs"])) {
      // By position: an echo's prompt comes first, its first token without a logprob (null).
      for (const v of lp["token_logprobs"]) this.logprobs.push(typeof v === "number" ? v : 0);
    }
  }

  /** The tokens to record; null when the upstream gave no prompt ids (it did not understand the request). */
  result(): { prompt: number[]; completion: number[]; logprobs: number[] } | null {
    if (this.prompt === null) return null;
    // An echo's logprobs cover its prompt, then the completion: the completion's are the last ones.
    const extra = this.logprobs.length - this.completion.length;
    return { prompt: this.prompt, completion: this.completion, logprobs: extra > 0 ? this.logprobs.slice(extra) : this.logprobs };
  }
}

/** Takes out of an answer (whole or a chunk) the token fields the client did not ask for; in place. */
export function stripTokenFields(answer: Obj, asked: ClientAsked): void {
  if (!asked.tokenIds) delete answer["prompt_token_ids"];
  if (!asked.metaInfo) delete answer["meta_info"];
  const choices = answer["choices"];
  if (!Array.isArray(choices)) return;
  for (const c of choices) {
    if (!isRecord(c)) continue;
    if (!asked.tokenIds) {
      delete c["prompt_token_ids"];
      delete c["token_ids"];
    }
    if (!asked.metaInfo) delete c["meta_info"];
    if (!asked.logprobs && c["logprobs"] !== undefined) c["logprobs"] = null;
  }
}

/** Choice 0 of an answer or chunk (a chunk of another choice has none). */
export function firstChoice(answer: Obj): Obj | null {
  const choices = answer["choices"];
  if (!Array.isArray(choices)) return null;
  const c: unknown = choices.find((x) => isRecord(x) && (x["index"] ?? 0) === 0);
  return isRecord(c) ? c : null;
}
