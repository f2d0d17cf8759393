/**
 * Tells the inference upstream to forget sessions whose group the engine dropped (as the
 * seed's _notify_llm_proxy_clear_sessions does): one POST of {session_ids, reason, group_ids}
 * to <upstream>/admin/clear_sessions with a deadline. Best effort: an unreachable or failing
 * upstream is reported in the ack (ok: false) and not retried, since rollouts must go on
 * without it and the engine would otherwise redeliver the command forever.
 */
import type { z } from "zod";
import type { ClearSessionsCommand } from "../../../src/protocol/commands";
import { describeError } from "../log";
import { addressForms, credentialForms, hideAddresses, hideSecrets, urlCredentials, withoutCredentials } from "../gateway/errors";
import type { Outcome } from "../outcome-journal";

export type ClearSessionsBody = z.infer<typeof ClearSessionsCommand>;

export async function clearSessions(
  upstream: string | null,
  body: ClearSessionsBody,
  opts: { timeoutMs: number; stop: AbortSignal },
): Promise<Outcome | null> {
  const what = `${body.session_ids.length} session${body.session_ids.length === 1 ? "" : "s"} of ${body.group_ids.length} group${body.group_ids.length === 1 ? "" : "s"} (${body.reason})`;
  if (body.session_ids.length === 0) return { ok: true, detail: `nothing to clear: no sessions for ${what}` };
  if (upstream === null) return { ok: false, detail: `cannot clear ${what}: this agent has no inference upstream configured (set inferenceAdminUrl or inferenceUpstream)` };
  // fetch refuses a URL with user:password in it: they go as Basic authorization, as the gateway sends them.
  const url = withoutCredentials(`${upstream}/admin/clear_sessions`);
  const basic = urlCredentials(upstream);
  // The detail goes to the exchange, where every role of the engine reads it: neither the
  // credentials nor the address (the agent's log names it), as the gateway's errors to clients.
  const shown = (text: string): string => hideAddresses(hideSecrets(text, credentialForms("", [upstream])), addressForms(url));
  const deadline = AbortSignal.timeout(opts.timeoutMs);
  try {
    const res = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", ...(basic === null ? {} : { authorization: `Basic ${Buffer.from(basic).toString("base64")}` }) },
      body: JSON.stringify({ session_ids: body.session_ids, reason: body.reason, group_ids: body.group_ids }),
      signal: AbortSignal.any([deadline, opts.stop]),
      // A redirect followed is a GET of another page, the sessions gone from it: its 2xx cleared nothing.
      redirect: "manual",
    });
    const text = shown((await res.text()).slice(0, 500));
    if (!res.ok) return { ok: false, detail: `the inference upstream answered ${res.status} to clearing ${what}: ${text}` };
    return { ok: true, detail: `the inference upstream cleared ${what}: ${text}` };
  } catch (e) {
    // Shutdown: leave the command unacked so the next agent carries it out.
    if (opts.stop.aborted) return null;
    const why = deadline.aborted ? `no answer within ${opts.timeoutMs / 1000} s` : shown(describeError(e));
    return { ok: false, detail: `could not clear ${what}: ${why}` };
  }
}

/**
 * Where clear_sessions go: inferenceAdminUrl when set, else the inference upstream the
 * gateway forwards to, without its /v1 (the seed's LLM proxy serves /v1/... and /admin/...
 * from one origin).
 */
export function clearSessionsBase(inferenceAdminUrl: string | null | undefined, inferenceUpstream: string | null): string | null {
  if (inferenceAdminUrl) return inferenceAdminUrl;
  if (inferenceUpstream === null) return null;
  return inferenceUpstream.replace(/\/v1\/?$/, "");
}
