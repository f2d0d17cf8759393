/**
 * The agent's inference gateway: the Worker relays a claimed episode's OpenAI-compatible call
 * here as a signed envelope (POST /rx/relay), and the gateway takes it to the trainer, over
 * ZeroMQ for AgentJet keys (sk-ajet-...), else over HTTP. Only envelopes signed with the
 * engine's gateway secret are served: the gateway may be exposed through a public tunnel, and
 * the Worker is what checks the client's per-claim key and the claim.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { createHmac, createSecretKey, type KeyObject } from "node:crypto";
import { ZodError } from "zod";
import { checkEnvelope, timestampFault, type HmacHex } from "../../../src/auth/gateway-signature";
import { envelopeRequestText, GATEWAY_RELAY_PATH, isRelayEnvelope, RELAY_ENDPOINTS, RelayEnvelope, RelayEnvelopeAsRead, SIGNATURE_HEADER, TIMESTAMP_HEADER } from "../../../src/protocol/relay";
import type { Logger } from "../log";
import { timerMs } from "../clock";
import { describeError } from "../log";
import { askRunner, decodeAgentJetKey, isAgentJetKey, isCompletionText, runnerMessage } from "./agentjet";
import { addressForms, credentialForms, failureKind, hideAddresses, hideSecrets, sendError, sendFailure, sendJson } from "./errors";
import { forwardHttp, type CallSignals, type UpstreamOptions } from "./http-upstream";
import { UpstreamErrors } from "./upstream-errors";
import { LogThrottle } from "../log-throttle";
import type { SecretSource, SecretWait } from "./secret";
import { CAPTURE_MODES, type TokenDialect } from "../../../src/protocol/ledger";
import { headOf } from "../../../src/protocol/limits";
import { CallTap } from "../ledger/call-tap";
import type { CallRecorder } from "../ledger/recorder";

export type GatewayOptions = UpstreamOptions & {
  host: string;
  port: number;
  secret: SecretSource;
  /** Model names /v1/models lists for AgentJet trainers. */
  models: string[];
  zmqReceiveTimeoutMs: number;
  logger: Logger;
  /** Records the calls the Worker asks to (the trajectory ledger); absent: none are. */
  ledger?: { recorder: CallRecorder; tokenDialect: TokenDialect };
  /** How long a request's headers and body may take to arrive; BODY_DEADLINE_MS unless a test shortens it. */
  bodyDeadlineMs?: number;
  /** Bytes of bodies not yet verified, across all connections; UNVERIFIED_BODY_BYTES by default. */
  unverifiedBodyBytes?: number;
  /** Open connections at most (keep-alive ones included); MAX_CONNECTIONS by default. */
  maxConnections?: number;
};

const isOneOf = <T extends string>(values: readonly T[], v: string): v is T => (values as readonly string[]).includes(v);

/** Envelopes carry a chat history; far larger ones are not from the Worker. */
const MAX_BODY_BYTES = 32 * 1024 * 1024;

/**
 * The Worker sends an envelope whole as soon as it has it; a connection that trickles its body
 * would otherwise hold its buffered bytes (up to MAX_BODY_BYTES) for ever. A minute lets even
 * the largest envelope through a slow tunnel. It is not shortened against forged requests that
 * trickle: UNVERIFIED_BODY_BYTES bounds what they can hold whatever the deadline, and a shorter
 * one would cut the Worker's large envelopes on slow links while an attacker just sends more.
 */
const BODY_DEADLINE_MS = 60_000;

/**
 * Bodies are buffered before their signature can be checked, and anyone who can reach a public
 * tunnel can send well-formed, fresh, forged signature headers: this bounds what all of them
 * together make the agent hold. The Worker's bodies are unverified only while they arrive (and
 * during the check), so thousands of calls in flight with chat histories of hundreds of KB take
 * a small part of it.
 */
const UNVERIFIED_BODY_BYTES = 256 * 1024 * 1024;

/**
 * The Worker holds a connection for each call in flight (HTTP/1.1, through a tunnel too) for as
 * long as its model takes, and keeps idle ones open: thousands of calls in flight are normal
 * (docs/relay.md), tens of thousands of connections are not. Past it, Node closes new ones at once.
 */
const MAX_CONNECTIONS = 16_384;

/** What a refusal for the unverified-bytes bound tells the Worker's client to wait: bodies arrive in milliseconds. */
const BUSY_RETRY_AFTER_SECONDS = 1;

/** How often a refusal that can come in floods (the budget's, a dropped connection) is logged at most. */
const FLOOD_LOG_MS = 10_000;

/** The Worker's signature headers: whole seconds, and the hex of an HMAC-SHA-256. */
const SIGNATURE_SHAPE = /^[0-9a-f]{64}$/;

/**
 * The gateway answers a little before the envelope's deadline so that its own 504 (which says
 * what it was waiting for) reaches the Worker before the Worker's fetch gives up.
 */
function answerBy(deadlineSeconds: number, receivedAt: number): number {
  const ms = deadlineSeconds * 1000;
  return receivedAt + ms - Math.min(1000, ms * 0.1);
}

export class Gateway {
  private readonly server: Server;
  private readonly hmac = nodeHmac();
  private readonly upstreamErrors: UpstreamErrors;
  private readonly unverified: Unverified;
  /** Bytes of bodies that failed their check and wait for the next secret fetch (waitFor). */
  private waiting = 0;
  /** The refusals that come in floods (busy, dropped connections): a warning at most every FLOOD_LOG_MS each. */
  private readonly floods = new LogThrottle(FLOOD_LOG_MS);
  /** What a newer Worker asks that this agent does not know (a capture mode, an endpoint): said once each, for the operator to upgrade. */
  private readonly newer = new LogThrottle(Number.POSITIVE_INFINITY);

  constructor(private readonly o: GatewayOptions) {
    this.upstreamErrors = new UpstreamErrors(o.logger);
    this.unverified = { held: 0, max: o.unverifiedBodyBytes ?? UNVERIFIED_BODY_BYTES };
    const bodyDeadlineMs = o.bodyDeadlineMs ?? BODY_DEADLINE_MS;
    // Node's requestTimeout covers receiving the request only (headers and body), not the
    // minutes a call then waits on its model: it is the body's deadline, at no cost per call.
    // Node checks it every connectionsCheckingInterval, on its own clock (none can be injected).
    this.server = createServer({ connectionsCheckingInterval: Math.min(30_000, Math.max(50, bodyDeadlineMs / 4)) }, (req, res) =>
      void this.handle(req, res).catch((e: unknown) => this.internal(res, e)),
    );
    this.server.requestTimeout = bodyDeadlineMs;
    this.server.headersTimeout = Math.min(this.server.headersTimeout, bodyDeadlineMs);
    this.server.keepAliveTimeout = 65_000;
    this.server.maxConnections = o.maxConnections ?? MAX_CONNECTIONS;
    this.server.on("drop", () => this.floodWarning("drop", `gateway: refused connections: ${this.server.maxConnections} are open (the most it keeps)`));
  }

  /** Bytes of bodies being received or checked whose signature is not verified yet. */
  get unverifiedBytes(): number {
    return this.unverified.held;
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(this.o.port, this.o.host, () => {
        this.server.off("error", reject);
        resolve();
      });
    });
    const a = this.server.address() as AddressInfo;
    const host = a.family === "IPv6" ? `[${a.address}]` : a.address;
    return `http://${host === "0.0.0.0" || host === "[::]" ? "127.0.0.1" : host}:${a.port}`;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  private internal(res: ServerResponse, e: unknown): void {
    this.o.logger.error(`gateway: ${describeError(e)}`);
    // Its message may name anything the gateway was talking to; the log above has it.
    if (!res.writableEnded) sendError(res, 500, `the agent's gateway failed: ${failureKind(e)} (the agent's log has the details)`, "gateway_error");
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const receivedAt = Date.now();
    // From the start: a client that hangs up while its body is read or the secret is fetched
    // must not have its call sent upstream afterwards, and the close happens only once.
    const stop = new AbortController();
    // Every response closes; aborting after an answer was sent would only build a DOMException.
    res.on("close", () => {
      if (!res.writableFinished) stop.abort();
    });
    const path = (req.url ?? "").split("?")[0];
    if (req.method === "GET" && path === "/rx/health") return sendJson(res, 200, '{"ok":true}');
    if (path !== GATEWAY_RELAY_PATH) return sendError(res, 404, `no route ${req.method} ${path}: the gateway serves only POST ${GATEWAY_RELAY_PATH}`, "not_found");
    if (req.method !== "POST") return sendError(res, 405, `use POST ${GATEWAY_RELAY_PATH}`, "method_not_allowed");

    const timestamp = header(req, TIMESTAMP_HEADER);
    const signature = header(req, SIGNATURE_HEADER);
    const unsigned = headerFault(timestamp, signature, Date.now() / 1000);
    if (unsigned !== null) {
      this.o.logger.warn(`gateway: refused a relay request from ${req.socket.remoteAddress}: ${unsigned}`);
      return refuseUnread(req, res, 401, unsigned, "invalid_signature");
    }
    // Headers like these are anyone's to make: what their body may hold is bounded before it is read.
    const declared = declaredLength(req);
    if (declared > MAX_BODY_BYTES) return refuseUnread(req, res, 413, tooLarge(), "too_large");
    if (this.unverified.held + declared > this.unverified.max) return this.busy(req, res);
    const read = await readBody(req, stop, this.unverified);
    if (typeof read === "number") {
      if (read === GONE || stop.signal.aborted) return;
      return read === TOO_LARGE ? refuseUnread(req, res, 413, tooLarge(), "too_large") : this.busy(req, res);
    }
    const body = read.text;
    let why: string | null;
    try {
      if (stop.signal.aborted) return;
      why = await this.o.secret.check((secret) => checkEnvelope(secret, timestamp, signature, body, Date.now() / 1000, this.hmac), this.waitFor(read.bytes));
    } finally {
      this.unverified.held -= read.bytes;
    }
    if (stop.signal.aborted) return;
    if (why !== null) {
      this.o.logger.warn(`gateway: refused a relay request from ${req.socket.remoteAddress}: ${why}`);
      return sendError(res, why.startsWith("the gateway") ? 503 : 401, why, "invalid_signature");
    }
    let env: RelayEnvelope;
    let requestText: string | null;
    try {
      const parsed: unknown = JSON.parse(body);
      if (isRelayEnvelope(parsed)) env = parsed;
      else {
        const read = this.fromNewerWorker(RelayEnvelopeAsRead.parse(parsed));
        if ("unknownEndpoint" in read) {
          const message = `this gateway does not serve ${read.unknownEndpoint}, which the exchange relays: the rollout agent on the GPU host may need upgrading`;
          this.sayOnce(`endpoint ${read.unknownEndpoint}`, `gateway: refused a relayed call: ${message}`);
          return sendError(res, 404, message, "unsupported_endpoint");
        }
        env = read;
      }
      requestText = envelopeRequestText(body, parsed as Record<string, unknown>);
    } catch (e) {
      this.o.logger.warn(`gateway: a signed envelope that does not parse: ${describeError(e)}`);
      return sendError(res, 400, `a signed envelope that does not parse: ${envelopeFault(e)}`, "bad_envelope");
    }

    // The Worker hangs up when its client does (or at its own deadline): `stop` then ends the wait upstream.
    const deadline = { aborted: false };
    const timer = setTimeout(() => {
      deadline.aborted = true;
      stop.abort();
    }, timerMs(answerBy(env.deadline_seconds, receivedAt) - Date.now()));
    const s: CallSignals = { signal: stop.signal, deadline, deadlineSeconds: env.deadline_seconds };
    const ajet = isAgentJetKey(env.trainer_api_key);
    const tap = this.tapFor(env, requestText, ajet, receivedAt);
    try {
      if (ajet) await this.agentJet(env, receivedAt, s, res, tap);
      else await forwardHttp(env, requestText, this.o, this.upstreamErrors, s, res, tap);
    } finally {
      clearTimeout(timer);
      if (tap !== null) this.record(tap, res);
    }
  }

  /**
   * An envelope that fails its check waits for the next secret fetch (a rotation's first calls),
   * holding its body: bodies waiting so hold at most a quarter of the unverified bound, so that
   * forged ones, which wait as well, cannot fill the rest and have the Worker's calls refused busy.
   */
  private waitFor(bytes: number): SecretWait {
    const most = this.unverified.max / 4;
    return {
      admit: () => {
        if (this.waiting + bytes > most) return false;
        this.waiting += bytes;
        return true;
      },
      release: () => {
        this.waiting -= bytes;
      },
    };
  }

  /**
   * An envelope only RelayEnvelopeAsRead reads, as this gateway serves it. A capture mode it does
   * not know is relayed as capture off: the call is served, and the ledger keeps at most the stub
   * of the turn (recorder.ts) instead of what the newer mode would, which this agent cannot make.
   * The common path never comes here: isRelayEnvelope takes the Worker's envelopes as they are.
   */
  private fromNewerWorker(read: RelayEnvelopeAsRead): RelayEnvelope | { unknownEndpoint: string } {
    const { endpoint, call, ...rest } = read;
    if (!isOneOf(RELAY_ENDPOINTS, endpoint)) return { unknownEndpoint: endpoint };
    if (call === undefined) return { ...rest, endpoint };
    const { capture } = call;
    if (isOneOf(CAPTURE_MODES, capture)) return { ...rest, endpoint, call: { ...call, capture } };
    this.sayOnce(`capture ${capture}`, `gateway: the exchange asks for capture mode "${capture}", which this agent does not know: its calls are relayed and recorded as with capture off (a stub per turn); upgrade the rollout agent to record them`);
    return { ...rest, endpoint, call: { ...call, capture: "off" } };
  }

  private sayOnce(kind: string, message: string): void {
    if (this.newer.due(kind) !== null) this.o.logger.warn(message);
  }

  private floodWarning(kind: string, message: string): void {
    const due = this.floods.due(kind);
    if (due !== null) this.o.logger.warn(due.between === 0 ? message : `${message} (${due.between + 1} times since the last such warning)`);
  }

  private busy(req: IncomingMessage, res: ServerResponse): void {
    this.floodWarning("busy", `gateway: refused relay requests 503: bodies not yet verified hold ${this.unverified.held} bytes, the most the gateway buffers (a flood of forged requests, or more large envelopes at once than it allows)`);
    res.setHeader("retry-after", String(BUSY_RETRY_AFTER_SECONDS));
    refuseUnread(req, res, 503, "the gateway is receiving as many envelopes as it buffers at once; retry shortly", "gateway_busy");
  }

  /**
   * A tap when the Worker asks for the call to be recorded (and the gateway records), else null:
   * the plain path. With capture off, a claim that had calls captured still gets one that only
   * sees the call's status and times: the ledger keeps a stub of the turn (recorder.ts).
   */
  private tapFor(env: RelayEnvelope, requestText: string | null, ajet: boolean, receivedAt: number): CallTap | null {
    const ledger = this.o.ledger;
    if (ledger === undefined || env.call === undefined) return null;
    if (env.request === null || env.endpoint === "/v1/models") return null;
    if (!ledger.recorder.watches(env.episode_uuid, env.fence, env.call.capture)) return null;
    // AgentJet runners answer what they answer: the ledger records the token fields they carry.
    return new CallTap({ ...env, request: env.request }, env.call, requestText, ajet ? null : ledger.tokenDialect, Date.now, receivedAt);
  }

  /** After the answer: the recording must neither fail the call nor hold its last bytes back. */
  private record(tap: CallTap, res: ServerResponse): void {
    try {
      const finished = tap.finish(!res.writableEnded);
      const recorder = this.o.ledger?.recorder;
      if (recorder !== undefined) setImmediate(() => recorder.record(finished));
    } catch (e) {
      this.o.logger.warn(`ledger: could not record call ${tap.call.call_id}: ${describeError(e)}`);
    }
  }

  private async agentJet(env: RelayEnvelope, receivedAt: number, s: CallSignals, res: ServerResponse, tap: CallTap | null): Promise<void> {
    const fail: Fail = (status, message, code) => sendFailure(res, tap, status, message, code);
    if (env.endpoint === "/v1/models") {
      return sendJson(res, 200, JSON.stringify({ object: "list", data: this.o.models.map((id) => ({ id, object: "model", created: 0, owned_by: "agentjet" })) }));
    }
    if (env.endpoint !== "/v1/chat/completions" || env.request === null) {
      return fail(404, `AgentJet trainers serve only /v1/chat/completions, not ${env.endpoint}`, "unsupported_endpoint");
    }
    const key = decodeAgentJetKey(env.trainer_api_key);
    if (!key.ok) return fail(502, `${key.why}; the trainer registered a key this gateway cannot route`, "bad_trainer_key");
    if (key.key.episode_uuid !== env.episode_uuid) {
      // Sending it on would file the call under another episode's context tracker.
      return fail(502, `the trainer's key names episode ${key.key.episode_uuid}, but the call is for ${env.episode_uuid}`, "bad_trainer_key");
    }
    const addr = key.key.episode_address;
    const answer = await askRunner(addr, runnerMessage(key.key, env.request), {
      deadlineAt: answerBy(env.deadline_seconds, receivedAt),
      receiveTimeoutMs: this.o.zmqReceiveTimeoutMs,
      signal: s.signal,
    });
    if (answer.kind === "bad_address") {
      this.o.logger.warn(`gateway: episode ${env.episode_uuid}: cannot connect to the runner at ${addr}: ${describeError(answer.error)}`);
      return fail(502, `cannot connect to the runner of episode ${env.episode_uuid}: ${failureKind(answer.error)}; the trainer registered a key this gateway cannot route`, "bad_trainer_key");
    }
    if (answer.kind === "aborted") {
      if (s.deadline.aborted) this.runnerTimedOut(env, addr, null, fail);
      return;
    }
    if (answer.kind === "deadline") return this.runnerTimedOut(env, addr, answer, fail);
    if (!isCompletionText(answer.text)) {
      // A runner may repeat its episode's key (the trainer's, which clients never hold) in an error.
      const shown = hideSecrets(hideAddresses(answer.text, addressForms(addr)), credentialForms(env.trainer_api_key));
      return fail(502, `the episode's runner answered something that is not a ChatCompletion: ${headOf(shown, 200)}`, "upstream_garbage");
    }
    tap?.whole(answer.text);
    tap?.answering(200);
    sendJson(res, 200, answer.text);
  }

  /**
   * The client hears which episode's runner was silent and for how long; only the operator's
   * log names its address, as clients never see the trainer's ZeroMQ addresses (docs/security.md).
   * `tries`: null when the deadline cut the wait short.
   */
  private runnerTimedOut(env: RelayEnvelope, addr: string, tries: RunnerTries | null, fail: Fail): void {
    this.o.logger.warn(`gateway: episode ${env.episode_uuid}: the runner at ${addr} did not answer within ${env.deadline_seconds} s${triesNote(tries, describeError)}`);
    fail(504, `the runner of episode ${env.episode_uuid} did not answer within ${env.deadline_seconds} s${triesNote(tries, failureKind)}`, "upstream_timeout");
  }
}

type Fail = (status: number, message: string, code: string) => void;
type RunnerTries = { attempts: number; lastError: unknown };

/** " (3 attempts; last error: …)" with the error as `describe` puts it; "" for null. */
function triesNote(tries: RunnerTries | null, describe: (e: unknown) => string): string {
  if (tries === null) return "";
  const last = tries.lastError === undefined ? "" : `; last error: ${describe(tries.lastError)}`;
  return ` (${tries.attempts} attempt${tries.attempts === 1 ? "" : "s"}${last})`;
}

/** Which of a signed envelope's fields are wrong, not their values: they hold the trainer's key and base URL. */
function envelopeFault(e: unknown): string {
  if (!(e instanceof ZodError)) return failureKind(e);
  return [...new Set(e.issues.map((i) => i.path.map(String).join(".") || "the envelope"))].join(", ");
}

/**
 * The same MAC as WebCrypto's, computed at once rather than on Node's thread pool, with the
 * secret kept as a key object: a string key is made into one on every MAC.
 */
function nodeHmac(): HmacHex {
  let made: { secret: string; key: KeyObject } | null = null;
  return (secret, text) => {
    if (made?.secret !== secret) made = { secret, key: createSecretKey(secret, "utf8") };
    return createHmac("sha256", made.key).update(text).digest("hex");
  };
}

/**
 * Why the signature headers alone show the request is not the exchange's (null: they may be).
 * The same judgement checkEnvelope makes again with the body, made before the body is read.
 */
function headerFault(timestamp: string | undefined, signature: string | undefined, nowSeconds: number): string | null {
  if (timestamp === undefined || signature === undefined) return "unsigned request: the gateway only accepts envelopes signed by the exchange";
  const stale = timestampFault(timestamp, nowSeconds);
  if (stale !== null) return stale;
  if (!SIGNATURE_SHAPE.test(signature)) return "malformed signature";
  return null;
}

/**
 * Answers from the headers and closes the connection: the body, up to MAX_BODY_BYTES from
 * anyone who can reach a public tunnel, is neither waited for nor buffered.
 */
function refuseUnread(req: IncomingMessage, res: ServerResponse, status: number, message: string, code: string): void {
  res.setHeader("connection", "close");
  res.once("finish", () => req.socket.destroySoon());
  sendError(res, status, message, code);
}

const tooLarge = (): string => `envelope larger than ${MAX_BODY_BYTES} bytes`;

/** The Content-Length, 0 without one (a chunked body is counted as it arrives). Node's parser has checked its digits. */
function declaredLength(req: IncomingMessage): number {
  const v = req.headers["content-length"];
  return v === undefined ? 0 : Number(v);
}

/** Bytes held by bodies whose signature is not verified yet, and the most they may hold. */
type Unverified = { held: number; readonly max: number };

function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

const TOO_LARGE = 413;
const BUSY = 503;
/** The client hung up: nobody to answer. */
const GONE = 0;
type Read = { text: string; bytes: number } | typeof TOO_LARGE | typeof BUSY | typeof GONE;

/**
 * The body as text and its bytes, which stay counted in `unverified` for the caller to give back
 * once it has checked the signature; TOO_LARGE past MAX_BODY_BYTES, BUSY past what `unverified`
 * has left (given back, the rest of the body unread). Counting costs an addition a chunk, as
 * the hot path must stay cheap. Events, not `for await`: the async iterator cost more per call.
 * A client that hangs up mid-body is no failure of the gateway: `gone` is aborted, its bytes
 * given back (GONE), and the caller, which checks it, has nobody to answer.
 */
function readBody(req: IncomingMessage, gone: AbortController, unverified: Unverified): Promise<Read> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let reading = true;
    const stop = (): void => {
      reading = false;
      req.off("data", onData);
      unverified.held -= size;
      chunks.length = 0;
    };
    const onData = (b: Buffer): void => {
      size += b.length;
      unverified.held += b.length;
      if (size > MAX_BODY_BYTES) {
        stop();
        resolve(TOO_LARGE);
      } else if (unverified.held > unverified.max) {
        stop();
        resolve(BUSY);
      } else chunks.push(b);
    };
    req.on("data", onData);
    req.once("end", () => {
      if (!reading) return;
      reading = false;
      resolve({ text: chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks).toString("utf8"), bytes: size });
    });
    req.once("error", (e) => {
      if (!reading) return;
      stop();
      if (!req.complete) {
        gone.abort();
        resolve(GONE);
      } else reject(e);
    });
  });
}
