/**
 * AgentJet trainers: an episode's LLM calls go over ZeroMQ to the REP socket its runner bound,
 * named by the trainer's own per-episode key, `sk-ajet-` + base64(JSON {agent_name, target_tag,
 * episode_uuid, episode_address}). One call is the JSON of {completion_request, agent_name,
 * target_tag, episode_uuid, timeline_uuid, preserve_sampling_params}; the answer is a
 * ChatCompletion JSON string. This is what AgentJet's own interchange server sends, minus the
 * HTTP hop to it: the gateway talks to the runner directly.
 */
import { randomUUID } from "node:crypto";
import { requestSocket, type HeldSocket } from "../zmq-sockets";
import { z } from "zod";
import { isZmqAddress } from "../runner-link";
import { timerMs } from "../clock";

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

/** A call's copies whose sockets wait for an answer at once: the oldest goes when one more is sent. */
const MAX_COPIES_WAITING = 4;

/** One copy of the call on its own socket, and how its wait ended. */
type Copy = { held: HeldSocket; ended: Promise<{ text: string } | { error: unknown }> };

/**
 * Sends one call and waits for the reply until `deadlineAt` (ms since the epoch). After a
 * receive timeout the call is sent again on a fresh socket, the "lazy pirate" pattern: a REQ
 * socket cannot send twice, and a runner that restarted and bound its address again never sees a
 * message queued on the old connection. The earlier copies' sockets go on waiting (the last
 * MAX_COPIES_WAITING of them), so a runner that was only slow, a model taking 61 s under a 60 s
 * receive timeout, answers on the socket of the copy it took first: with the old socket closed,
 * each answer was lost and the runner worked through copy after copy until the deadline.
 */
export async function askRunner(addr: string, message: string, opts: { deadlineAt: number; receiveTimeoutMs: number; signal: AbortSignal }): Promise<RunnerAnswer> {
  let attempts = 0;
  let lastError: unknown = undefined;
  const copies: Copy[] = [];
  const drop = (c: Copy): void => {
    copies.splice(copies.indexOf(c), 1);
    c.held.release();
  };
  // Closing the sockets rejects their pending receives: the client went away, stop waiting.
  const onAbort = (): void => {
    for (const c of copies) c.held.sock.close();
  };
  opts.signal.addEventListener("abort", onAbort, { once: true });
  try {
    for (;;) {
      const left = opts.deadlineAt - Date.now();
      if (left <= 0) return { kind: "deadline", attempts, lastError };
      if (opts.signal.aborted) return { kind: "aborted" };
      // Waits, until the deadline, while the agent's sockets are all held (zmq-sockets.ts); its timeouts count from then.
      const held = await requestSocket({ linger: 0 }, AbortSignal.any([opts.signal, AbortSignal.timeout(timerMs(left))]));
      if (held === null) return opts.signal.aborted ? { kind: "aborted" } : { kind: "deadline", attempts, lastError };
      const until = Math.floor(opts.deadlineAt - Date.now());
      const wait = Math.min(until, opts.receiveTimeoutMs);
      if (wait <= 0) {
        held.release();
        return { kind: "deadline", attempts, lastError };
      }
      attempts++;
      held.sock.sendTimeout = wait;
      // Its answer may come until the deadline; the next copy goes after `wait`.
      held.sock.receiveTimeout = timerMs(until);
      // connect() throws at once, without waiting, for an address ZeroMQ cannot use: retrying
      // would spin the agent's event loop until the deadline, opening a socket each pass.
      try {
        held.sock.connect(addr);
      } catch (e) {
        held.release();
        return { kind: "bad_address", error: e };
      }
      if (copies.length >= MAX_COPIES_WAITING) drop(copies[0]!);
      const ended = (async () => {
        await held.sock.send(message);
        const [reply] = await held.sock.receive();
        return { text: reply?.toString("utf8") ?? "" };
      })().catch((error: unknown) => ({ error }));
      copies.push({ held, ended });
      let timer: ReturnType<typeof setTimeout> | undefined;
      const resend = new Promise<null>((r) => (timer = setTimeout(() => r(null), wait)));
      const first = await Promise.race([...copies.map((copy) => copy.ended.then((end) => ({ copy, end }))), resend]);
      clearTimeout(timer);
      if (first === null) continue;
      if ("text" in first.end) return { kind: "reply", text: first.end.text, attempts };
      if (opts.signal.aborted) return { kind: "aborted" };
      // EAGAIN is a timeout; anything else (a socket error) is sent again the same way.
      if ((first.end.error as { code?: unknown }).code !== "EAGAIN") lastError = first.end.error;
      drop(first.copy);
    }
  } finally {
    opts.signal.removeEventListener("abort", onAbort);
    for (const c of copies.splice(0)) c.held.release();
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
