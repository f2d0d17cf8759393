/**
 * The trainer facade: a local HTTP server that looks like AgentJet's swarm server to an
 * unmodified trainer (default port 10086) and forwards each call to the engine with the
 * trainer token. Every answer is the engine's answer, status and body, errors included.
 *
 * The trainer is chatty: every runner thread registers episodes in bursts and asks
 * is_episode_claimed about once a second. Such calls arriving within `coalesceMs` go to the
 * engine as one batch request; identical status reads arriving together share one request.
 * See coalescer.ts for why that never changes what the trainer is told.
 *
 * It answers only processes of the agent's own user: what it forwards carries the trainer's
 * per-episode keys, base URLs and ZeroMQ addresses (get_episode_buffer) and the engine's
 * status, and on a shared GPU host any user can reach a loopback port. The unmodified trainer
 * sends no credentials, and builds the facade's URL from a port alone (AJET_DAT_INTERCHANGE_PORT),
 * so no secret could travel in it: the connection's owner is looked up in /proc/net instead.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { z } from "zod";
import { BatchBoolResponse, CheckWhetherEpisodeClaimedRequest, RegisterEpisodeRequest } from "../../src/protocol";
import { Coalescer, timerSchedule, type Schedule } from "./coalescer";
import type { EngineLink, RawAnswer } from "./engine-link";
import { withoutTrailingSlash } from "../../src/http/path-token";
import { describeError, type Logger } from "./log";
import { procNetAvailable, procPeerUid, type PeerUidLookup } from "./peer-uid";

/** The Worker refuses larger bodies; refusing them here too saves the upload. */
const MAX_BODY_BYTES = 4 * 1024 * 1024;
/** The batch endpoints take at most this many items. */
const MAX_BATCH = 1000;
/**
 * A batch request's items, in bytes of JSON: the Worker refuses bodies over 4 MiB, and 1,000
 * registrations with long keys and URLs (each within the engine's limits) are more than that.
 */
const BATCH_BODY_BYTES = 3 * 1024 * 1024;
/**
 * How long close() waits for the answers of calls it holds (queued in a coalescing window, or
 * on their way to the engine) before it drops their connections: a stopping agent answers what
 * it sent on, but an engine that never answers must not hold the agent's stop.
 */
const CLOSE_GRACE_MS = 5000;

/**
 * What the facade serves: AgentJet's trainer-side endpoints and two harmless reads. Nothing
 * else is forwarded, although the trainer token could do more: the agent's own channel
 * (/agent/commands, /agent/ack) must not be reachable by any local process through here.
 */
const SERVED = new Set([
  "/register_episode",
  "/update_engine_status",
  "/get_engine_status",
  "/is_episode_claimed",
  "/update_current_batch_rollout_pool_information",
  "/get_current_batch_rollout_pool_information",
  "/get_episode_buffer",
  "/get_reward_history",
]);

/** Reads that identical concurrent calls may share (GET, no side effects). */
const SHARED_READS = new Set(["/get_engine_status", "/get_current_batch_rollout_pool_information"]);

export type FacadeStats = {
  /** Calls the trainer made to the facade. */
  trainerCalls: number;
  /** Requests the facade made to the Worker on their behalf. */
  workerRequests: number;
  byPath: Record<string, number>;
};

export type FacadeOptions = {
  link: EngineLink;
  host: string;
  port: number;
  coalesceMs: number;
  logger: Logger;
  schedule?: Schedule;
  /** Extra agent status for GET /_agent/status. */
  status?: () => Record<string, unknown>;
  /**
   * Who holds a connection's other end: procPeerUid by default where /proc/net lists
   * connections (Linux); null (the default elsewhere) serves every connection, with a warning.
   */
  peerUid?: PeerUidLookup | null;
  /** The only uid served; the agent's own by default. */
  ownUid?: number;
  /** Every peer is served by the operator's choice (--facade-any-peer): said at start as such, not as a missing /proc. */
  anyPeer?: boolean;
};

type Check = z.output<typeof CheckWhetherEpisodeClaimedRequest>;
type Registration = z.output<typeof RegisterEpisodeRequest>;

export class Facade {
  private readonly server: Server;
  private readonly stats: FacadeStats = { trainerCalls: 0, workerRequests: 0, byPath: {} };
  private readonly register: Coalescer<Registration, RawAnswer>;
  private readonly claimed: Coalescer<Check, RawAnswer>;
  private readonly reads = new Map<string, Coalescer<null, RawAnswer>>();
  /** Set when the exchange turns out to have no batch endpoints: calls then go one by one. */
  private batchUnsupported = false;
  private url_: string | null = null;
  /** Why each connection's peer is refused (null: it is served); per connection, not per request, as the trainer's runner threads keep theirs alive. */
  private readonly peers = new WeakMap<Socket, Promise<string | null>>();
  private readonly peerUid: PeerUidLookup | null;
  private readonly ownUid: number | undefined;
  /** Uids (null: unlisted peers) already in the log, so a refused process's retries do not flood it. */
  private readonly refusedLogged = new Set<number | null>();
  /** Responses not yet finished, and what close() calls when the last one is. */
  private readonly answering = new Set<ServerResponse>();
  private allAnswered: (() => void) | null = null;

  constructor(private readonly o: FacadeOptions) {
    this.ownUid = o.ownUid ?? process.getuid?.();
    this.peerUid = o.peerUid !== undefined ? o.peerUid : this.ownUid !== undefined && procNetAvailable() ? procPeerUid : null;
    if (o.anyPeer === true) {
      o.logger.warn("the trainer facade serves every process that reaches it (facadeAnyPeer): each can read the trainer's per-episode keys");
    } else if (this.peerUid === null) {
      o.logger.warn("the trainer facade cannot tell this host's users apart (no /proc/net/tcp): any local process can read the trainer's per-episode keys through it; on a shared host, run the agent on Linux");
    }
    const schedule = o.schedule ?? timerSchedule;
    this.register = new Coalescer(o.coalesceMs, MAX_BATCH, (items) => this.sendBatches("/batch/register_episode", "/register_episode", (episodes) => ({ episodes }), items), schedule);
    this.claimed = new Coalescer(o.coalesceMs, MAX_BATCH, (items) => this.sendBatches("/batch/is_episode_claimed", "/is_episode_claimed", (checks) => ({ checks }), items), schedule);
    // Nothing a request does may end the agent: an error thrown past handle() is answered here
    // (a rejection nobody handles ends a Node process, the trainer's watch and deliveries with it).
    this.server = createServer((req, res) => {
      this.answering.add(res);
      res.once("close", () => {
        this.answering.delete(res);
        if (this.answering.size === 0) this.allAnswered?.();
      });
      return this.handle(req, res).catch((e: unknown) => {
        this.o.logger.error(`trainer facade: a request failed unexpectedly: ${describeError(e)}`);
        if (!res.headersSent) send(res, errorAnswer(500, "internal_error", "The local agent's facade failed to answer this request; it goes on serving."));
        else res.destroy();
      });
    });
    // Looked up as the connection opens, while its first request's headers arrive.
    const lookup = this.peerUid;
    if (lookup !== null) this.server.on("connection", (socket: Socket) => this.peers.set(socket, this.refusal(socket, lookup)));
    // Long-lived keep-alive connections from many runner threads are the normal case.
    this.server.keepAliveTimeout = 65_000;
  }

  /** The facade's own base URL, e.g. http://127.0.0.1:10086 (after listen). */
  get url(): string {
    if (this.url_ === null) throw new Error("the facade is not listening");
    return this.url_;
  }

  get counters(): Readonly<FacadeStats> {
    return this.stats;
  }

  listen(): Promise<string> {
    return new Promise((resolve, reject) => {
      const onError = (e: NodeJS.ErrnoException): void =>
        reject(
          new Error(
            e.code === "EADDRINUSE"
              ? `the facade cannot listen on ${this.o.host}:${this.o.port}: the port is in use (another swarm server or agent?); choose another with --facade-port`
              : `the facade cannot listen on ${this.o.host}:${this.o.port}: ${e.message}`,
          ),
        );
      this.server.once("error", onError);
      this.server.listen(this.o.port, this.o.host, () => {
        this.server.off("error", onError);
        const a = this.server.address() as AddressInfo;
        const host = a.family === "IPv6" ? `[${a.address}]` : a.address;
        this.url_ = `http://${host}:${a.port}`;
        resolve(this.url_);
      });
    });
  }

  /**
   * Stops taking connections, sends what the coalescing windows hold, and closes once every call
   * taken is answered (at most `graceMs`): a trainer's registration sent on to the engine gets the
   * engine's answer, not a dropped connection it would retry against a facade that is gone.
   */
  async close(graceMs = CLOSE_GRACE_MS): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.register.flush();
    this.claimed.flush();
    for (const read of this.reads.values()) read.flush();
    if (this.answering.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        this.allAnswered = resolve;
        timer = setTimeout(resolve, graceMs);
      });
      clearTimeout(timer);
      this.allAnswered = null;
    }
    // Every response is finished (or the grace is over): what is left are idle keep-alive connections.
    this.server.closeAllConnections();
    return closed;
  }

  /** Why the connection's peer is not served, or null when it runs as the agent's user. */
  private async refusal(socket: Socket, lookup: PeerUidLookup): Promise<string | null> {
    const ends = { localAddress: socket.localAddress, localPort: socket.localPort, remoteAddress: socket.remoteAddress, remotePort: socket.remotePort };
    let uid: number | null;
    try {
      uid = await lookup(ends);
    } catch (e) {
      this.o.logger.warn(`the trainer facade could not look up who opened a connection: ${describeError(e)}`);
      uid = null;
    }
    if (uid !== null && uid === this.ownUid) return null;
    if (!this.refusedLogged.has(uid)) {
      this.refusedLogged.add(uid);
      this.o.logger.warn(`the trainer facade refused a connection from ${uid === null ? `${ends.remoteAddress}:${ends.remotePort}, which is no connection of this host's (another host or network namespace?)` : `a process of uid ${uid}`}; it serves only uid ${this.ownUid}, the agent's (further refusals of the same are not logged)`);
    }
    const who = uid === null ? "this connection is not one of this host's own (another host or network namespace?)" : `this connection is from uid ${uid}`;
    return `The local agent's facade serves only processes of the agent's own user (uid ${this.ownUid}), as it hands out the trainer's per-episode keys; ${who}. Run the trainer on this host as the agent's user.`;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (this.peerUid !== null) {
      const refused = await (this.peers.get(req.socket) ?? this.refusal(req.socket, this.peerUid));
      if (refused !== null) return send(res, errorAnswer(403, "forbidden_peer", refused));
    }
    let url: URL;
    try {
      url = new URL(req.url ?? "/", "http://facade");
    } catch {
      // A target Node's parser takes and URL does not (`//[`).
      return send(res, errorAnswer(400, "invalid_request", `The request target ${JSON.stringify(req.url)} is no URL path.`));
    }
    // One trailing slash is the route, as the engine serves it.
    url.pathname = withoutTrailingSlash(url.pathname);
    const method = req.method ?? "GET";
    if (url.pathname === "/_agent/status" && method === "GET") {
      return send(res, { status: 200, contentType: "application/json", body: Buffer.from(JSON.stringify({ facade: this.stats, ...this.o.status?.() })) });
    }
    if (!SERVED.has(url.pathname)) {
      return send(res, errorAnswer(404, "not_found", `No route ${method} ${url.pathname} on the local agent's facade; it serves ${[...SERVED].join(", ")}.`));
    }
    this.stats.trainerCalls++;
    this.stats.byPath[url.pathname] = (this.stats.byPath[url.pathname] ?? 0) + 1;
    let body: Buffer;
    try {
      body = await readBody(req, MAX_BODY_BYTES);
    } catch (e) {
      if (e instanceof TooLarge) return send(res, errorAnswer(413, "payload_too_large", `The request body exceeds ${MAX_BODY_BYTES} bytes.`));
      return; // the trainer hung up mid-request
    }
    try {
      send(res, await this.answer(method, url, body, req.headers["content-type"]));
    } catch (e) {
      send(res, unreachable(this.o.link.baseUrl, e));
    }
  }

  private answer(method: string, url: URL, body: Buffer, contentType: string | undefined): Promise<RawAnswer> {
    const path = url.pathname;
    const batching = this.o.coalesceMs > 0 && !this.batchUnsupported;
    if (method === "POST" && batching && (path === "/register_episode" || path === "/is_episode_claimed")) {
      // Only well-formed calls join a batch; anything else goes alone so the engine words its own error.
      const json = parseJson(body);
      if (path === "/register_episode") {
        const r = RegisterEpisodeRequest.safeParse(json);
        if (r.success) return this.register.submit(r.data);
      } else {
        const c = CheckWhetherEpisodeClaimedRequest.safeParse(json);
        if (c.success) return this.claimed.submit(c.data);
      }
    }
    if (method === "GET" && this.o.coalesceMs > 0 && SHARED_READS.has(path) && url.search === "") {
      const key = path;
      let c = this.reads.get(key);
      if (c === undefined) {
        c = new Coalescer<null, RawAnswer>(this.o.coalesceMs, Number.MAX_SAFE_INTEGER, async (items) => {
          const answer = await this.forward("GET", key, null, undefined);
          return items.map(() => answer);
        }, this.o.schedule ?? timerSchedule);
        this.reads.set(key, c);
      }
      return c.submit(null);
    }
    // fetch refuses a GET or HEAD with a body (requests.get(url, json={}) sends one), which the engine would ignore.
    const sent = method === "GET" || method === "HEAD" ? null : body;
    return this.forward(method, path + url.search, sent, contentType);
  }

  private forward(method: string, pathAndQuery: string, body: Buffer | null, contentType: string | undefined): Promise<RawAnswer> {
    this.stats.workerRequests++;
    return this.o.link.forward(method, pathAndQuery, body, contentType);
  }

  /** The items in as few batch requests as fit the Worker's body limit, sent together; answers in the items' order. */
  private async sendBatches<T>(batchPath: string, singlePath: string, wrap: (items: T[]) => object, items: T[]): Promise<RawAnswer[]> {
    const parts = byBytes(items, BATCH_BODY_BYTES);
    const answers = await Promise.all(parts.map((part) => this.sendBatch(batchPath, singlePath, wrap(part), part)));
    return answers.flat();
  }

  /** One batch request; each item gets what its single call would have got. */
  private async sendBatch<T>(batchPath: string, singlePath: string, payload: object, items: T[]): Promise<RawAnswer[]> {
    const single = (item: T): Promise<RawAnswer> => this.forward("POST", singlePath, Buffer.from(JSON.stringify(item)), "application/json").catch((e) => unreachable(this.o.link.baseUrl, e));
    if (items.length === 1 || this.batchUnsupported) return Promise.all(items.map(single));
    let answer: RawAnswer;
    try {
      answer = await this.forward("POST", batchPath, Buffer.from(JSON.stringify(payload)), "application/json");
    } catch (e) {
      return items.map(() => unreachable(this.o.link.baseUrl, e));
    }
    if (answer.status === 404 && isRouteMissing(answer)) {
      this.batchUnsupported = true;
      this.o.logger.warn(`the exchange has no ${batchPath} endpoint; the facade forwards the trainer's calls one by one`);
      return Promise.all(items.map(single));
    }
    // An error for the batch (a revoked token, an engine that is gone) is the error each call would get.
    if (answer.status !== 200) return items.map(() => answer);
    const parsed = BatchBoolResponse.safeParse(parseJson(answer.body));
    if (!parsed.success || parsed.data.results.length !== items.length) {
      this.o.logger.error(`the exchange answered ${batchPath} with an unexpected body; forwarding these ${items.length} calls one by one`);
      return Promise.all(items.map(single));
    }
    return parsed.data.results.map((r) => ({ status: 200, contentType: answer.contentType, body: Buffer.from(JSON.stringify(r)) }));
  }
}

/** `items` in runs whose JSON stays within `max` bytes (an item larger alone is a run of its own). */
function byBytes<T>(items: T[], max: number): T[][] {
  const parts: T[][] = [];
  let part: T[] = [];
  let size = 0;
  for (const item of items) {
    const n = Buffer.byteLength(JSON.stringify(item)) + 1;
    if (part.length > 0 && size + n > max) {
      parts.push(part);
      part = [];
      size = 0;
    }
    part.push(item);
    size += n;
  }
  if (part.length > 0) parts.push(part);
  return parts;
}

class TooLarge extends Error {}

function readBody(req: IncomingMessage, max: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > max) {
        reject(new TooLarge());
        req.resume();
        return;
      }
      chunks.push(chunk);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString("utf8"));
  } catch {
    return undefined;
  }
}

/** The Worker's answer for a path it does not route (an exchange older than the batch endpoints). */
function isRouteMissing(a: RawAnswer): boolean {
  const j = parseJson(a.body) as { error?: unknown } | undefined;
  return j?.error === "not_found";
}

function errorAnswer(status: number, error: string, detail: string): RawAnswer {
  return { status, contentType: "application/json", body: Buffer.from(JSON.stringify({ error, detail })) };
}

function unreachable(base: string, e: unknown): RawAnswer {
  const timeout = e instanceof Error && (e.name === "TimeoutError" || e.name === "AbortError");
  return timeout
    ? errorAnswer(504, "exchange_timeout", `The local agent got no answer from the exchange at ${base} in time.`)
    : errorAnswer(502, "exchange_unreachable", `The local agent cannot reach the exchange at ${base}: ${describeError(e)}`);
}

function send(res: ServerResponse, a: RawAnswer): void {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(a.status, { "content-type": a.contentType, "content-length": a.body.length, ...(a.retryAfter === undefined ? {} : { "retry-after": a.retryAfter }) });
  res.end(a.body);
}
