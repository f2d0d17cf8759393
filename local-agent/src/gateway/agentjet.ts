/**
 * AgentJet trainers: an episode's LLM calls go over ZeroMQ to the REP socket its runner bound,
 * named by the trainer's own per-episode key, `sk-ajet-` + base64(JSON {agent_name, target_tag,
 * episode_uuid, episode_address}). One call is the JSON of {completion_request, agent_name,
 * target_tag, episode_uuid, timeline_uuid, preserve_sampling_params}; the answer is a
 * ChatCompletion JSON string. This is what AgentJet's own interchange server sends, minus the
 * HTTP hop to it: the gateway talks to the runner directly.
 */
import { randomUUID } from "node:crypto";
import { requestSocket } from "../zmq-sockets";
import { z } from "zod";
import { isZmqAddress } from "../runner-link";

export const AGENTJET_KEY_PREFIX = "sk-ajet-";

const AgentJetKey = z.object({
  agent_name: z.string().min(1),
  target_tag: z.string().min(1),
  episode_uuid: z.string().min(1),
  episode_address: z.string().refine(isZmqAddress, "is not a ZeroMQ address"),
});
export type AgentJetKey = z.infer<typeof AgentJetKey>;

export function isAgentJetKey(key: string): boolean {
  return key.startsWith(AGENTJET_KEY_PREFIX);
}

/** The key's fields, or why it cannot be used. */
export function decodeAgentJetKey(key: string): { ok: true; key: AgentJetKey } | { ok: false; why: string } {
  let json: unknown;
  try {
    json = JSON.parse(Buffer.from(key.slice(AGENTJET_KEY_PREFIX.length), "base64").toString("utf8"));
  } catch {
    return { ok: false, why: "the trainer's sk-ajet- key is not base64 of JSON" };
  }
  const parsed = AgentJetKey.safeParse(json);
  if (!parsed.success) return { ok: false, why: `the trainer's sk-ajet- key: ${parsed.error.issues.map((i) => `${i.path.join(".")} ${i.message}`).join("; ")}` };
  return { ok: true, key: parsed.data };
}

export function runnerMessage(key: AgentJetKey, request: Record<string, unknown>): string {
  // The gateway answers one whole completion (the Worker turns it into a chunk for streaming
  // clients), so the runner must not be asked to stream.
  const { stream: _stream, stream_options: _options, ...completion_request } = request;
  return JSON.stringify({
    completion_request,
    agent_name: key.agent_name,
    target_tag: key.target_tag,
    episode_uuid: key.episode_uuid,
    // A fresh timeline per call, as AgentJet's interchange server makes one.
    timeline_uuid: randomUUID().replaceAll("-", ""),
    preserve_sampling_params: false,
  });
}

export type RunnerAnswer =
  | { kind: "reply"; text: string; attempts: number }
  /** `lastError`: the last socket error other than a receive timeout, undefined for none. */
  | { kind: "deadline"; attempts: number; lastError: unknown }
  /** ZeroMQ refused the address itself (no port, a path too long): trying again cannot help. */
  | { kind: "bad_address"; error: unknown }
  | { kind: "aborted" };

/**
 * Sends one call and waits for the reply until `deadlineAt` (ms since the epoch). After a
 * receive timeout the socket is closed (linger 0) and the call sent again on a fresh one, the
 * "lazy pirate" pattern: a REQ socket cannot send twice, and a runner that restarted and bound
 * its address again never sees a message queued on the old connection. A runner that was only
 * slow then computes the call twice; the receive timeout (AgentJet waits 60 s) makes that rare.
 */
export async function askRunner(addr: string, message: string, opts: { deadlineAt: number; receiveTimeoutMs: number; signal: AbortSignal }): Promise<RunnerAnswer> {
  let attempts = 0;
  let lastError: unknown = undefined;
  for (;;) {
    const left = opts.deadlineAt - Date.now();
    if (left <= 0) return { kind: "deadline", attempts, lastError };
    if (opts.signal.aborted) return { kind: "aborted" };
    // Waits, until the deadline, while the agent's sockets are all held (zmq-sockets.ts); its timeouts count from then.
    const held = await requestSocket({ linger: 0 }, AbortSignal.any([opts.signal, AbortSignal.timeout(left)]));
    if (held === null) return opts.signal.aborted ? { kind: "aborted" } : { kind: "deadline", attempts, lastError };
    const { sock } = held;
    const wait = Math.floor(Math.min(opts.deadlineAt - Date.now(), opts.receiveTimeoutMs));
    if (wait <= 0) {
      held.release();
      return { kind: "deadline", attempts, lastError };
    }
    attempts++;
    sock.sendTimeout = wait;
    sock.receiveTimeout = wait;
    // connect() throws at once, without waiting, for an address ZeroMQ cannot use: retrying
    // would spin the agent's event loop until the deadline, opening a socket each pass.
    try {
      sock.connect(addr);
    } catch (e) {
      held.release();
      return { kind: "bad_address", error: e };
    }
    // Closing the socket rejects the pending receive: the client went away, stop waiting.
    const onAbort = (): void => sock.close();
    opts.signal.addEventListener("abort", onAbort, { once: true });
    try {
      await sock.send(message);
      const [reply] = await sock.receive();
      return { kind: "reply", text: reply?.toString("utf8") ?? "", attempts };
    } catch (e) {
      if (opts.signal.aborted) return { kind: "aborted" };
      // EAGAIN is the timeout; anything else (a socket error) is retried the same way.
      if ((e as { code?: unknown }).code !== "EAGAIN") lastError = e;
    } finally {
      opts.signal.removeEventListener("abort", onAbort);
      held.release();
    }
  }
}

/** A ChatCompletion as the runner sends it: a JSON object with choices. */
export function isCompletionText(text: string): boolean {
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === "object" && v !== null && Array.isArray((v as { choices?: unknown }).choices);
  } catch {
    return false;
  }
}
