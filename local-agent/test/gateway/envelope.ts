/** Signed relay envelopes as the Worker sends them (the same shared signing code). */
import { signEnvelope } from "../../../src/auth/gateway-signature";
import { GATEWAY_RELAY_PATH, SIGNATURE_HEADER, TIMESTAMP_HEADER, type RelayEnvelope } from "../../../src/protocol/relay";

export function agentJetKey(episode: string, address: string): string {
  return "sk-ajet-" + Buffer.from(JSON.stringify({ agent_name: "agent", target_tag: "policy", episode_uuid: episode, episode_address: address })).toString("base64");
}

export function envelope(over: Partial<RelayEnvelope>): RelayEnvelope {
  return {
    endpoint: "/v1/chat/completions",
    engine: "eng",
    episode_uuid: "ep-1",
    fence: 1,
    trainer_api_key: "sk-trainer",
    trainer_base_url: "",
    deadline_seconds: 5,
    request: { model: "tiny", messages: [{ role: "user", content: "hi" }] },
    ...over,
  };
}

/** POSTs the envelope signed with `secret` (null: unsigned). */
export async function post(gateway: string, env: RelayEnvelope, secret: string | null, opts: { ts?: number; tamper?: boolean } = {}) {
  const body = JSON.stringify(env);
  const ts = opts.ts ?? Math.floor(Date.now() / 1000);
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (secret !== null) {
    headers[TIMESTAMP_HEADER] = String(ts);
    headers[SIGNATURE_HEADER] = await signEnvelope(secret, ts, body);
  }
  const res = await fetch(gateway + GATEWAY_RELAY_PATH, { method: "POST", headers, body: opts.tamper ? body.replace('"model"', '"modem"') : body });
  return { status: res.status, type: res.headers.get("content-type") ?? "", text: await res.text() };
}
