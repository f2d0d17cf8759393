/**
 * Per-claim keys and gateway secrets are both HMACs of the deployment's CLAIM_KEY_SECRET: no text
 * a claim's key signs may ever be the text a gateway secret is derived from.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { signClaimKey } from "../src/auth/claim-key";
import { gatewaySecret } from "../src/auth/gateway-signature";
import type { EngineObject } from "../src/engine/engine-object";
import { admin, claimKeyFields as keyFields, createEngine } from "./support/harness";

/** The HMAC bytes a per-claim key carries (its last part, base64url), as lowercase hex. */
function keySignatureHex(key: string): string {
  const sig = key.split(".").at(-1)!;
  const bin = atob(sig.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (sig.length % 4)) % 4));
  return Array.from(bin, (c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join("");
}

describe("per-claim keys and gateway secrets, both MACs of CLAIM_KEY_SECRET", () => {
  it("a per-claim key's signature is never another engine's gateway secret", async () => {
    // A key of an engine made before incarnations signs `<engine>\n<episode>\n<fence>`; a gateway
    // secret was the MAC of `gateway\n<engine>\n<incarnation>\n<generation>`, under the same
    // secret. So the key of an engine named "gateway" for the episode `<victim>\n<incarnation>`
    // (episode ids may hold newlines) carried the victim engine's gateway secret at generation =
    // fence, which lets its holder sign envelopes the victim's gateway serves (docs/security.md:
    // only the engine's own trainer may fetch it).
    const secret = "test-claim-key-secret";
    const victim = "victim-engine";
    const victimIncarnation = "AbCdEfGh";
    const generation = 3;
    const key = await signClaimKey(secret, { engine: "gateway", incarnation: "", episode_uuid: `${victim}\n${victimIncarnation}`, fence: generation });
    expect(keySignatureHex(key)).not.toBe(await gatewaySecret(secret, victim, victimIncarnation, generation));
  });

  it("end to end: a client of an engine named 'gateway' (no incarnation) is not handed another engine's gateway secret", async () => {
    // The same through the API: the trainer of another tenant's engine named "gateway", made
    // before incarnations (its incarnation cleared here: claim-key.ts still serves such engines),
    // registers an episode named `<victim>\n<incarnation>` (the incarnation is in every key the
    // victim's clients hold) and claims it; the openai_api_key it gets must not carry the
    // victim's gateway secret.
    const victim = await createEngine("victim");
    const victimSecret = (await victim.as("trainer").gatewaySecret()).secret;
    const victimKeyIncarnation = await (async () => {
      // The incarnation a victim client sees in its own claim keys.
      await victim.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 0 });
      await victim.as("trainer").registerEpisode({ episode_uuid: "v-1", openai_base_url: "", openai_api_key: "", zmq_listen_result_addr: "" });
      const c = await victim.as("client").claimEpisode({ client_uuid: "victim-client", episode_type: "train", discard_episode_timeout: 600 });
      return (await keyFields(c.openai_api_key)).incarnation;
    })();

    const attacker = await createEngine(undefined, { name: "gateway" });
    await runInDurableObject(attacker.stub, (instance: EngineObject) => {
      const store = (instance as unknown as { store: { meta: Record<string, unknown>; saveMeta(m: unknown): void } }).store;
      store.saveMeta({ ...store.meta, incarnation: "" });
    });
    await attacker.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 0 });
    const reg = await attacker.as("trainer").registerEpisode({ episode_uuid: `${victim.name}\n${victimKeyIncarnation}`, openai_base_url: "", openai_api_key: "", zmq_listen_result_addr: "" });
    expect(reg.success).toBe(true);
    const claim = await attacker.as("client").claimEpisode({ client_uuid: "attacker", episode_type: "train", discard_episode_timeout: 600 });
    const fence = (await keyFields(claim.openai_api_key)).fence;
    // The victim's generation is 0; bring it to the fence as revocations of trainer tokens do.
    for (let g = 0; g < fence; g++) await admin.revokeToken(victim.name, (await admin.issueToken(victim.name, "trainer", `spare ${g}`)).id);
    const secretNow = fence === 0 ? victimSecret : (await victim.as("trainer").gatewaySecret()).secret;
    expect(keySignatureHex(claim.openai_api_key)).not.toBe(secretNow);
  });
});
