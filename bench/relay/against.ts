/**
 * bench:relay --against DIR: the exchange and agent of another checkout, with claims of their
 * own on the same model, timed in the same rounds as this tree's relay. Its use: the relay as it
 * was when an issue was filed against the relay as it is, without a machine's phase between them.
 */
import type { CaptureMode } from "../../src/protocol/ledger";
import { serveRelayedEngine } from "../serve/relayed-engine";

export type AgainstSide = {
  /** One claim's OpenAI base URL and key per client. */
  targets: { url: string; key: string }[];
  /** The capture mode the other exchange's engine ran with. */
  capture: string;
  stop(): Promise<void>;
};

export async function startAgainst(o: { checkout: string; modelUrl: string; clients: number; dir: string; capture: CaptureMode | undefined }): Promise<AgainstSide> {
  const side = await serveRelayedEngine({ name: "bench-relay-against", claimKeySecret: "bench-relay-against-secret", checkout: o.checkout, capture: o.capture, agentDir: o.dir, agentSettings: { ROLLOUT_HEARTBEAT_SECONDS: "1" } });
  try {
    const trainer = side.engine.as("trainer");
    const client = side.engine.as("client");
    const targets: AgainstSide["targets"] = [];
    for (let i = 0; i < o.clients; i++) {
      await trainer.registerEpisode({ episode_uuid: `ep-${i}`, openai_base_url: `${o.modelUrl}/v1`, openai_api_key: "sk-bench-trainer", zmq_listen_result_addr: "" });
      const c = await client.claimEpisode({ client_uuid: `c-${i}`, discard_episode_timeout: 3600 });
      if (!c.success) throw new Error(`claim ${i} on ${o.checkout}: ${c.fail_cause}`);
      targets.push({ url: c.openai_base_url, key: c.openai_api_key });
    }
    return { targets, capture: side.capture, stop: side.stop };
  } catch (e) {
    await side.stop();
    throw e;
  }
}
