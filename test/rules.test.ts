import { describe, expect, it } from "vitest";
import { EMPTY_ACCUMULATOR, accumulate, backoffMs, notReadyCause, rewardValues, scalarReward, summarize, NO_EPISODES_CAUSE } from "../src/engine/rules";
import { mayRun } from "../src/auth/roles";
import { signClaimKey, verifyClaimKey } from "../src/auth/claim-key";
import { b64url } from "../src/auth/tokens";

describe("reward statistics", () => {
  it("matches the two-pass mean and population std (numpy.std) on awkward values", () => {
    const xs = [1e9 + 4, 1e9 + 7, 1e9 + 13, 1e9 + 16, -3.5, 0, 0.25];
    const s = summarize(accumulate(EMPTY_ACCUMULATOR, xs));
    const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
    const std = Math.sqrt(xs.reduce((a, x) => a + (x - mean) ** 2, 0) / xs.length);
    expect(s.count).toBe(7);
    expect(s.mean).toBeCloseTo(mean, 3);
    expect(s.std / std).toBeCloseTo(1, 9);
    expect(s.min).toBe(-3.5);
    expect(s.max).toBe(1e9 + 16);
  });

  it("accumulates across calls the same as in one call, and survives JSON", () => {
    const once = accumulate(EMPTY_ACCUMULATOR, [1, 2, 3, 4]);
    const twice = accumulate(JSON.parse(JSON.stringify(accumulate(EMPTY_ACCUMULATOR, [1, 2]))), [3, 4]);
    expect(twice).toEqual(once);
    expect(summarize(once)).toEqual({ count: 4, mean: 2.5, std: Math.sqrt(1.25), min: 1, max: 4 });
  });

  it("reads scalar, list and missing rewards", () => {
    expect(rewardValues(0.5)).toEqual([0.5]);
    expect(rewardValues([1, 0])).toEqual([1, 0]);
    expect(rewardValues(null)).toEqual([]);
    expect(scalarReward([1, 0])).toBe(0.5);
    expect(scalarReward(null)).toBeNull();
  });
});

describe("claim fail causes", () => {
  it("keeps the seed's texts that SwarmClient matches on", () => {
    expect(NO_EPISODES_CAUSE).toContain("No available episodes to claim.");
    expect(notReadyCause("ENGINE.WEIGHT_SYNCING")).toContain("Engine is syncing weights");
    expect(notReadyCause("ENGINE.ROLLING_POST")).toContain("Engine is in post-rolling phase");
    expect(notReadyCause("ENGINE.OFFLINE")).toBe(
      "Engine not ready. Current status: [ENGINE.OFFLINE]. Please start the engine first. Please use one of the client to run `client.sync_train_config() + client.start_engine()` to start the engine.",
    );
  });
});

describe("roles", () => {
  it("grants each role its operations and nothing else", () => {
    expect(mayRun("viewer", "get_engine_status")).toBe(true);
    expect(mayRun("viewer", "claim_episode")).toBe(false);
    expect(mayRun("client", "claim_episode")).toBe(true);
    expect(mayRun("client", "register_episode")).toBe(false);
    expect(mayRun("client", "start_engine")).toBe(false);
    expect(mayRun("operator", "start_engine")).toBe(true);
    expect(mayRun("operator", "claim_episode")).toBe(true);
    expect(mayRun("operator", "agent_poll")).toBe(false);
    expect(mayRun("trainer", "register_episode")).toBe(true);
    expect(mayRun("trainer", "agent_ack")).toBe(true);
    expect(mayRun("trainer", "claim_episode")).toBe(false);
    expect(mayRun("admin", "agent_ack")).toBe(true);
  });
});

describe("backoff", () => {
  it("doubles from the base and stops at the cap", () => {
    expect([1, 2, 3, 4].map((a) => backoffMs(a))).toEqual([1000, 2000, 4000, 8000]);
    expect(backoffMs(40)).toBe(300_000);
  });
});

describe("base64url", () => {
  it("encodes every length and byte value as btoa does, without padding", () => {
    const viaBtoa = (b: Uint8Array) => btoa(String.fromCharCode(...b)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
    for (let len = 0; len <= 40; len++) {
      const bytes = Uint8Array.from({ length: len }, (_, i) => (i * 97 + len * 31) & 255);
      expect(b64url(bytes)).toBe(viaBtoa(bytes));
    }
    const all = Uint8Array.from({ length: 256 }, (_, i) => i);
    expect(b64url(all)).toBe(viaBtoa(all));
  });
});

describe("per-claim keys", () => {
  it("verifies its own signature and rejects forgeries", async () => {
    const key = await signClaimKey("secret", { engine: "e1", episode_uuid: "ep.1/x", fence: 3 });
    expect(await verifyClaimKey("secret", key)).toEqual({ engine: "e1", episode_uuid: "ep.1/x", fence: 3 });
    expect(await verifyClaimKey("other-secret", key)).toBeNull();
    const parts = key.split(".");
    expect(await verifyClaimKey("secret", [parts[0], parts[1], "4", parts[3], parts[4]].join("."))).toBeNull();
    expect(await verifyClaimKey("secret", [parts[0], "e2", parts[2], parts[3], parts[4]].join("."))).toBeNull();
    expect(await verifyClaimKey("secret", "sk-ajet-abc")).toBeNull();
  });
});
