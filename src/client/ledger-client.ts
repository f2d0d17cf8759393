/**
 * A typed client for an engine's trajectory ledger (src/ledger): its settings, and its
 * trajectories one at a time, a page at a time, or all of them as a stream of JSON lines; the
 * media their messages refer to (`rx-media:sha256:<hex>`), one at a time or put back in place.
 */
import type { z } from "zod";
import {
  LedgerConfigView,
  Trajectory,
  TrajectoryListResponse,
  type TrajectoryExportQuery,
  type TrajectoryListQuery,
  type TrajectoryReadQuery,
  type UpdateLedgerConfigRequest,
} from "../protocol/ledger";
import { ExchangeError, jsonAnswer, pathSegment, queryString, readAnswer, requestJson, retryAfterSeconds, shownUrl, type FetchLike } from "./http";
import type { EngineClientOptions } from "./exchange-client";
import { inlineMedia, mediaRefsOf } from "../ledger/media-refs";

type Query = Record<string, string | number | undefined>;

export class LedgerClient {
  private readonly base: string;
  private readonly fetchFn: FetchLike;
  private readonly token: string | undefined;

  constructor(o: EngineClientOptions) {
    this.base = o.baseUrl.replace(/\/+$/, "");
    this.fetchFn = o.fetch ?? ((input, init) => fetch(input, init));
    this.token = o.token;
  }

  private get<S extends z.ZodType>(path: string, schema: S): Promise<z.output<S>> {
    return requestJson(this.fetchFn, this.base + path, schema, { method: "GET", token: this.token });
  }

  config = () => this.get("/ledger/config", LedgerConfigView);
  configure = (patch: UpdateLedgerConfigRequest) => requestJson(this.fetchFn, `${this.base}/ledger/config`, LedgerConfigView, { method: "POST", body: patch, token: this.token });

  list = (q: z.input<typeof TrajectoryListQuery> = {}) => this.get(`/trajectories${queryString(q as Query)}`, TrajectoryListResponse);

  /**
   * The episode's latest claim, or the claim of `fence`. `{ form: "delta" }`: each call as what it
   * added to the call it names, an answer that grows with the claim's turns rather than their
   * square; `wholeTrajectory()` makes it whole.
   */
  trajectory = async (episodeUuid: string, fence?: number, q: TrajectoryReadQuery = {}) => this.get(trajectoryPath(episodeUuid, fence, q), Trajectory);

  /**
   * The trajectory, unless the one the caller holds (by the `etag` it came with) is still the
   * claim's whole trajectory: then "unchanged", and nothing is sent or parsed. For a trainer that
   * watches live claims (async RL): a claim of an hour is tens of MB, and its answer is read again
   * only once a call is added or the claim ends. `etag` null: read it (the first time).
   */
  async trajectoryIfChanged(episodeUuid: string, etag: string | null, fence?: number, q: TrajectoryReadQuery = {}): Promise<{ trajectory: Trajectory; etag: string | null } | "unchanged"> {
    const url = this.base + trajectoryPath(episodeUuid, fence, q);
    const headers: Record<string, string> = this.token === undefined ? {} : { authorization: `Bearer ${this.token}` };
    if (etag !== null) headers["if-none-match"] = etag;
    const res = await this.fetchFn(url, { headers });
    if (res.status === 304) return "unchanged";
    return { trajectory: jsonAnswer(res, await res.text(), Trajectory, url), etag: res.headers.get("etag") };
  }

  /** The medium a trajectory's messages name as `rx-media:sha256:<sha256>`: the string the client sent, exactly. */
  async media(sha256: string): Promise<string> {
    const headers: Record<string, string> = this.token === undefined ? {} : { authorization: `Bearer ${this.token}` };
    const res = await this.fetchFn(`${this.base}/trajectories/media/${pathSegment("sha256", sha256)}`, { headers });
    const text = await res.text();
    if (!res.ok) throw refusalOf(res, text);
    return text;
  }

  /**
   * `messages` (a call's, as read) with each media reference replaced by its medium, fetched once
   * each: the conversation as the client sent it. A medium the ledger no longer has throws 404.
   */
  async inlineMedia(messages: readonly unknown[]): Promise<unknown[]> {
    const media = new Map<string, string>();
    for (const d of mediaRefsOf(messages)) media.set(d, await this.media(d));
    return inlineMedia(messages, media);
  }

  /** Every trajectory the filters pass, newest first, parsed a line at a time as it streams in. */
  async *export(q: z.input<typeof TrajectoryExportQuery> = {}): AsyncGenerator<Trajectory> {
    const headers: Record<string, string> = this.token === undefined ? {} : { authorization: `Bearer ${this.token}` };
    const url = `${this.base}/trajectories/export${queryString({ format: "jsonl", ...(q as Query) })}`;
    const res = await this.fetchFn(url, { headers });
    if (!res.ok || res.body === null) {
      throw refusalOf(res, await res.text(), "export_failed");
    }
    const decoder = new TextDecoder();
    // A line (one trajectory) may be many MB: its pieces are kept apart and joined once, and only
    // each new piece is searched for the line's end. Appending to one string and searching it
    // whole took time quadratic in the line's bytes (6 s for a 14.6 MB line).
    const pieces: string[] = [];
    let sent = 0;
    for await (const chunk of exportChunks(res.body, url, () => sent)) {
      const text = decoder.decode(chunk, { stream: true });
      let from = 0;
      let nl: number;
      while ((nl = text.indexOf("\n", from)) >= 0) {
        pieces.push(text.slice(from, nl));
        from = nl + 1;
        const line = pieces.join("");
        pieces.length = 0;
        if (line !== "") {
          sent++;
          yield exportedLine(line, url);
        }
      }
      if (from < text.length) pieces.push(text.slice(from));
    }
    // Every line ends in a newline: text after the last one is a line the body broke off in,
    // though its stream ended cleanly (as a server may end a chunked answer whose body failed).
    const rest = pieces.join("") + decoder.decode();
    if (rest.trim() !== "") {
      throw new ExchangeError(200, EXPORT_INTERRUPTED, `the export from ${shownUrl(url)} broke off after ${sent} trajectories, inside the next one's line: what was read is not the whole export`);
    }
  }
}

/**
 * An episode named `export` is read as `/export/latest`: `/trajectories/export` is the export.
 * One named `.` or `..` (the exchange registers none since) cannot be named in a URL at all (pathSegment).
 */
function trajectoryPath(episodeUuid: string, fence: number | undefined, q: TrajectoryReadQuery): string {
  return `/trajectories/${pathSegment("episode_uuid", episodeUuid)}${fence !== undefined ? `/${fence}` : episodeUuid === "export" ? "/latest" : ""}${queryString(q as Query)}`;
}

/** The code of the ExchangeError for an export whose stream broke off before its end. */
export const EXPORT_INTERRUPTED = "export_interrupted";

/**
 * The export's body a chunk at a time, a read that fails (the exchange cut the answer off: the
 * token was revoked or the engine deleted meanwhile, or D1, R2 or the connection failed) thrown
 * as an ExchangeError: what was read so far is not the whole export, and a caller catching the
 * client's errors must not take it for one. Only the read is wrapped, so an error thrown into the
 * export's generator by its consumer stays the consumer's own.
 */
async function* exportChunks(body: ReadableStream<Uint8Array>, url: string, sent: () => number): AsyncGenerator<Uint8Array> {
  const reader = body.getReader();
  let done = false;
  try {
    for (;;) {
      let read: Awaited<ReturnType<typeof reader.read>>;
      try {
        read = await reader.read();
      } catch (e) {
        done = true;
        const why = e instanceof Error ? e.message : String(e);
        throw new ExchangeError(200, EXPORT_INTERRUPTED, `the export from ${shownUrl(url)} broke off after ${sent()} trajectories, before its end (a token revoked or the engine deleted meanwhile, or a failure on the way): ${why}`);
      }
      if (read.done) {
        done = true;
        return;
      }
      yield read.value;
    }
  } finally {
    // A consumer that stops early frees the connection; a stream that ended or broke needs nothing.
    if (!done) await reader.cancel().catch(() => undefined);
  }
}

/** One line of an export, as ExchangeErrors when it is no JSON (bad_response) or not a trajectory this client reads (UNREADABLE_ANSWER). */
function exportedLine(line: string, url: string): Trajectory {
  let json: unknown;
  try {
    json = JSON.parse(line);
  } catch {
    throw new ExchangeError(200, "bad_response", `expected a JSON line from ${shownUrl(url)}, got: ${line.slice(0, 200)}`);
  }
  return readAnswer(Trajectory, json, 200, url);
}

/** The error an answer that is not 2xx stands for: its JSON's code and detail, or its text. */
function refusalOf(res: Response, text: string, fallback = "request_failed"): ExchangeError {
  let code = fallback;
  let detail = text.slice(0, 300);
  try {
    const j = JSON.parse(text) as { error?: string; detail?: string };
    code = j.error ?? code;
    detail = j.detail ?? detail;
  } catch {
    // not JSON: the text is the detail
  }
  return new ExchangeError(res.status, code, detail, retryAfterSeconds(res.headers.get("retry-after")));
}
