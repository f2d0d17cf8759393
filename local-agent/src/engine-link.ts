/**
 * The agent's connection to its engine on the exchange: the typed EngineClient (with a
 * deadline on every request, so a Worker that stops answering cannot hang the agent), plus
 * the two calls the typed client cannot make for us:
 *
 * - polling commands leniently: the typed client validates the whole answer, so one command
 *   the agent does not understand would make every poll fail forever; here each command is
 *   checked on its own and a bad one is acked as failed;
 * - forwarding a trainer's request verbatim (the facade must answer exactly what the engine
 *   answers, status and bytes, errors included).
 */
import { z } from "zod";
import { EngineClient, ExchangeError, UNREADABLE_ANSWER, type FetchLike } from "../../src/client";
import { requestJson } from "../../src/client/http";
import { Command, PollCommandsResponse } from "../../src/protocol";
import type { Incarnation } from "./outcome-journal";

/** `retryAfter`: the engine's Retry-After (a 429, a 503 storage_full), passed on with its answer. */
export type RawAnswer = { status: number; contentType: string; body: Buffer; retryAfter?: string };

/** `incarnation`: the engine's, as the poll answer that handed the command out named it. */
export type PolledCommand = ({ ok: true; command: Command } | { ok: false; seq: number | null; problem: string }) & { incarnation: Incarnation };

const LenientPoll = PollCommandsResponse.extend({ commands: z.array(z.unknown()) });

export class EngineLink {
  readonly baseUrl: string;
  /**
   * This process's poll session: after a restart, the engine hands commands leased by the dead
   * process's polls to this one at once instead of after their lease runs out.
   */
  readonly session = crypto.randomUUID();
  readonly client: EngineClient;
  /**
   * fetch with the request deadline; every JSON answer but a 5xx or 429 calls `onAnswered`.
   * The exchange answers everything in JSON, errors too: an HTML page (a proxy's, a login
   * wall's, a CDN's challenge) is not the exchange answering, and counted as if it were, each
   * one would end the outage the next one starts, waking every loop out of its backoff.
   */
  readonly fetch: FetchLike;
  /** Told whenever the exchange answers: however the agent reached it, it is reachable (see reachability.ts). */
  onAnswered: () => void = () => undefined;

  constructor(
    server: string,
    engine: string,
    private readonly token: string,
    /** Deadline for any request; a long poll gets its wait on top. */
    private readonly timeoutMs: number,
    fetchImpl: FetchLike = (input, init) => fetch(input, init),
  ) {
    this.baseUrl = `${server.replace(/\/+$/, "")}/e/${encodeURIComponent(engine)}`;
    this.fetch = async (input, init) => {
      const res = await withDeadline(fetchImpl, input, init, timeoutMs);
      if (res.status < 500 && res.status !== 429 && (res.headers.get("content-type") ?? "").includes("application/json")) this.onAnswered();
      return res;
    };
    this.client = new EngineClient({ baseUrl: this.baseUrl, token, fetch: this.fetch });
  }

  /** Long-polls for commands; each is validated on its own. */
  async pollCommands(waitSeconds: number, limit: number, stop: AbortSignal): Promise<PolledCommand[]> {
    const signal = AbortSignal.any([stop, AbortSignal.timeout(waitSeconds * 1000 + this.timeoutMs)]);
    const url = `${this.baseUrl}/agent/commands?wait=${waitSeconds}&limit=${limit}&session=${this.session}`;
    const answer = await requestJson(this.fetch, url, LenientPoll, { method: "GET", token: this.token, signal });
    const incarnation = answer.incarnation ?? null;
    return answer.commands.map((raw): PolledCommand => {
      const parsed = Command.safeParse(raw);
      if (parsed.success) return { ok: true, command: parsed.data, incarnation };
      const seq = typeof raw === "object" && raw !== null && "seq" in raw && typeof raw.seq === "number" && raw.seq > 0 ? raw.seq : null;
      const problem = parsed.error.issues.map((i) => `${i.path.join(".") || "command"}: ${i.message}`).join("; ");
      return { ok: false, seq, problem, incarnation };
    });
  }

  /** Sends a trainer's request on to the engine and returns its answer untouched. */
  async forward(method: string, pathAndQuery: string, body: Buffer | null, contentType: string | undefined): Promise<RawAnswer> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.token}` };
    if (contentType !== undefined) headers["content-type"] = contentType;
    const res = await this.fetch(this.baseUrl + pathAndQuery, { method, headers, body: body === null || body.length === 0 ? null : new Uint8Array(body) });
    const retryAfter = res.headers.get("retry-after");
    return { status: res.status, contentType: res.headers.get("content-type") ?? "application/json", body: Buffer.from(await res.arrayBuffer()), ...(retryAfter === null ? {} : { retryAfter }) };
  }
}

const NULL_BODY_STATUSES = new Set([204, 205, 304]);

/**
 * One request with a deadline over the whole exchange, body included. The body is read here,
 * so the timer is cleared as soon as the answer is in: AbortSignal.timeout would keep a timer
 * (and its signal) alive for the full deadline after every request, thousands of them at
 * delivery rates.
 */
async function withDeadline(fetchImpl: FetchLike, input: string, init: RequestInit | undefined, timeoutMs: number): Promise<Response> {
  // A caller with its own signal (the long poll) has its own deadline on it.
  const ac = new AbortController();
  const timer = init?.signal ? undefined : setTimeout(() => ac.abort(new DOMException(`no answer within ${timeoutMs / 1000} s`, "TimeoutError")), timeoutMs);
  try {
    const res = await fetchImpl(input, { ...init, signal: init?.signal ?? ac.signal });
    const body = await res.arrayBuffer();
    // A Response of these statuses takes no body, an empty one neither (a proxy's 304, say).
    return new Response(NULL_BODY_STATUSES.has(res.status) ? null : body, { status: res.status, statusText: res.statusText, headers: res.headers });
  } finally {
    clearTimeout(timer);
  }
}

/**
 * True for failures worth retrying: no answer, a timeout, a 5xx / 429 from the exchange, or an
 * answer that is not JSON (a proxy's page). Not a 2xx answer this agent cannot read
 * (UNREADABLE_ANSWER): the exchange did what was asked and would answer the same again.
 */
export function isTransient(err: unknown): boolean {
  if (err instanceof ExchangeError) return err.code !== UNREADABLE_ANSWER && (err.status >= 500 || err.status === 429 || err.code === "bad_response");
  return true;
}
