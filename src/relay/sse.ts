/**
 * Streaming answers for the relay. The stream opens when the gateway's answer begins, or when
 * the first keep-alive is due if that comes first, and carries SSE comments as keep-alives while
 * the answer is pending (proxies and clients drop silent connections), then the upstream's
 * events. A refusal that comes before the stream opens (a 400 for a context too long, a 429), a
 * gateway that cannot be reached and a deadline met by then are answered as a whole call's error,
 * with its status: OpenAI's SDKs classify and retry by status, and never retry an error event.
 * A whole ChatCompletion (what a ZeroMQ runner answers) becomes one chunk; a later upstream
 * error or a broken stream becomes an error event, since the status line has been sent.
 *
 * The stream is workerd's native IdentityTransformStream, and an SSE upstream is piped into it
 * with pipeTo, so workerd moves the tokens without running JavaScript per chunk. A read/write
 * loop in JS cost 0.36 ms of workerd CPU per token here (72 ms for a 200-token answer), the
 * pipe 0.16 ms (BENCHMARKS.md, `bench:relay -- --drip 200`).
 */
import { completionToChunks } from "./completion-chunk";
import type { OpenAIError } from "../protocol/relay";
import { gatewayErrorResponse, openaiErrorBody, openaiErrorIn, openaiErrorResponse, refusedBehind, refusedBehindBody } from "./openai-errors";

const enc = new TextEncoder();
export const KEEP_ALIVE = ": keep-alive\n\n";

const event = (data: unknown): Uint8Array => enc.encode(`data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`);

/** The error event for a gateway's error answer, and the status it stands for (a refusal behind the exchange is a 502). */
function errorFromUpstream(status: number, text: string): { status: number; error: OpenAIError } {
  if (refusedBehind(status)) return { status: 502, error: refusedBehindBody(status, text) };
  return { status, error: openaiErrorIn(text) ?? openaiErrorBody(status >= 400 ? status : 502, `the inference upstream answered ${status}: ${text.slice(0, 300)}`, "upstream_error") };
}

/**
 * `includeUsage`: the client asked for usage in its stream (a whole completion's goes in a last
 * chunk then). `failed` hears each error event the stream ends with, and the status it stands for.
 */
export async function relayStream(
  upstream: Promise<Response>,
  keepAliveMs: number,
  describeFailure: (e: unknown) => { status: number; message: string; code: string },
  includeUsage = false,
  failed: (status: number, error: OpenAIError) => void = () => undefined,
): Promise<Response> {
  const { readable, writable } = new IdentityTransformStream();
  let writer = writable.getWriter();
  const errorEvent = (status: number, error: OpenAIError): Uint8Array => {
    failed(status, error);
    return event(error);
  };
  /** The error event for an answer that broke off (or met the deadline) while it was read. */
  const brokeOff = (e: unknown): Uint8Array => {
    const f = describeFailure(e);
    return f.code === "upstream_timeout" ? errorEvent(f.status, openaiErrorBody(f.status, f.message, f.code)) : errorEvent(502, openaiErrorBody(502, `the inference upstream broke off mid-stream: ${f.message}`, "upstream_stream_broken"));
  };
  /** The answer's text, or null once the error event for a body that broke off is written. */
  const readWhole = async (res: Response): Promise<string | null> => {
    try {
      return await res.text();
    } catch (e) {
      await writer.write(brokeOff(e));
      return null;
    }
  };
  let keepAliveDue = (): void => undefined;
  const due = new Promise<null>((resolve) => (keepAliveDue = () => resolve(null)));
  const timer = setInterval(() => {
    keepAliveDue();
    void writer.write(enc.encode(KEEP_ALIVE)).catch(() => clearInterval(timer));
  }, keepAliveMs);
  /** `head`: the gateway's 2xx answer when it came before the stream opened, else null (then awaited here). */
  const pump = async (head: Response | null): Promise<void> => {
    let res: Response;
    try {
      res = head ?? (await upstream);
    } catch (e) {
      clearInterval(timer);
      const f = describeFailure(e);
      await writer.write(errorEvent(f.status, openaiErrorBody(f.status, f.message, f.code)));
      return;
    }
    clearInterval(timer);
    if (!res.ok || res.body === null) {
      const text = await readWhole(res);
      if (text !== null) {
        const failure = errorFromUpstream(res.status, text);
        await writer.write(errorEvent(failure.status, failure.error));
      }
      return;
    }
    if ((res.headers.get("content-type") ?? "").includes("text/event-stream")) {
      // The keep-alives have stopped (above), so the writer can step aside for the pipe; the
      // stream stays open after it (preventClose, preventAbort) for the [DONE] close or an error event.
      writer.releaseLock();
      try {
        await res.body.pipeTo(writable, { preventClose: true, preventAbort: true });
        writer = writable.getWriter();
        return;
      } catch (e) {
        writer = writable.getWriter();
        // The client left (its side cancelled, so the pipe's write failed): nothing broke off,
        // and no event could reach it. Not a failed call.
        if (writer.desiredSize === null) return;
        await writer.write(brokeOff(e));
        return;
      }
    }
    const text = await readWhole(res);
    if (text === null) return;
    let completion: unknown;
    try {
      completion = JSON.parse(text);
    } catch {
      await writer.write(errorEvent(502, openaiErrorBody(502, `the inference upstream answered something that is not JSON: ${text.slice(0, 200)}`, "upstream_garbage")));
      return;
    }
    if (typeof completion !== "object" || completion === null || Array.isArray(completion)) {
      await writer.write(errorEvent(502, openaiErrorBody(502, "the inference upstream answered JSON that is not a completion", "upstream_garbage")));
      return;
    }
    for (const chunk of completionToChunks(completion as Record<string, unknown>, includeUsage)) await writer.write(event(chunk));
    await writer.write(event("[DONE]"));
  };
  const streamed = (work: Promise<void>): Response => {
    void work.catch(() => undefined).finally(() => writer.close().catch(() => undefined));
    return new Response(readable, { status: 200, headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" } });
  };

  // The status line can wait until the first keep-alive is due, and no longer. A call that could
  // not be sent (the gateway unreachable) or met its deadline by then is told with its status too.
  const head = await Promise.race([upstream.catch((e: unknown) => ({ unsent: e })), due]);
  if (head === null) return streamed(pump(null));
  if (!(head instanceof Response)) {
    clearInterval(timer);
    const f = describeFailure(head.unsent);
    return openaiErrorResponse(f.status, f.message, f.code);
  }
  if (head.ok) return streamed(pump(head));
  clearInterval(timer);
  let text: string;
  try {
    text = await head.text();
  } catch (e) {
    return streamed(writer.write(brokeOff(e)));
  }
  return gatewayErrorResponse(head, text);
}
