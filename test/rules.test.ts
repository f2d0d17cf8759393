import { describe, expect, it } from "vitest";
import { EMPTY_ACCUMULATOR, accumulate, backoffMs, claimsLive, notReadyCause, rewardValues, scalarReward, summarize, NO_EPISODES_CAUSE, PACED_CAUSE } from "../src/engine/rules";
import { paceAdmits, paceAdmitsAlone, worstLag } from "../src/engine/pacing";
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

  it("accumulates one episode's values a call: across calls the same as in one call but for the episodes, and survives JSON", () => {
    const once = accumulate(EMPTY_ACCUMULATOR, [1, 2, 3, 4]);
    const twice = accumulate(JSON.parse(JSON.stringify(accumulate(EMPTY_ACCUMULATOR, [1, 2]))), [3, 4]);
    expect(twice).toEqual({ ...once, episodes: 2 });
    expect(summarize(once)).toEqual({ count: 4, episodes: 1, mean: 2.5, std: Math.sqrt(1.25), min: 1, max: 4 });
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
    // A paced claim is one the client should ask for again soon, as for an empty queue.
    expect(PACED_CAUSE.startsWith("No available episodes to claim.")).toBe(true);
    expect(notReadyCause("ENGINE.WEIGHT_SYNCING")).toContain("Engine is syncing weights");
    expect(notReadyCause("ENGINE.ROLLING_POST")).toContain("Engine is in post-rolling phase");
    expect(notReadyCause("ENGINE.OFFLINE")).toBe(
      "Engine not ready. Current status: [ENGINE.OFFLINE]. Please start the engine first. Please use one of the client to run `client.sync_train_config() + client.start_engine()` to start the engine.",
    );
  });
});

describe("where claims live", () => {
  it("keeps AgentJet's statuses by default, and adds the weight sync only when the engine keeps claims across it", () => {
    const off = { keep_claims_across_sync: false, sync_hold_seconds: 120, max_sync_seconds: 600 };
    const on = { ...off, keep_claims_across_sync: true };
    expect(["ENGINE.ROLLING", "ENGINE.ROLLING_POST"].every((s) => claimsLive(s as "ENGINE.ROLLING", off))).toBe(true);
    expect(claimsLive("ENGINE.WEIGHT_SYNCING", off)).toBe(false);
    expect(claimsLive("ENGINE.WEIGHT_SYNCING", on)).toBe(true);
    for (const s of ["ENGINE.OFFLINE", "ENGINE.BOOTING", "ENGINE.WEIGHT_EXPORTING"] as const) expect(claimsLive(s, on)).toBe(false);
  });
});

describe("pacing", () => {
  const state = { consumerVersion: 10, maxStaleness: 2, oldestVersion: 9, outstanding: 5, consumedAtVersion: 0, perVersion: 4 };
  it("bounds the worst lag by how far the oldest lags now and how many versions the rest can move the consumer on", () => {
    // The oldest lags 1; with one more begun, 5 others can be taken before it: one version more.
    expect(worstLag(state, 1)).toBe(1 + 1);
    expect(worstLag(state, 4)).toBe(1 + 2);
    expect(worstLag({ ...state, oldestVersion: null, outstanding: 0 }, 1)).toBe(0);
    // What the consumer took at its version already brings its next version nearer.
    expect(worstLag({ ...state, consumedAtVersion: 3 }, 1)).toBe(1 + 2);
    expect(worstLag({ ...state, consumedAtVersion: 9 }, 1)).toBe(worstLag({ ...state, consumedAtVersion: 4 }, 1));
    // A rollout begun at a version the consumer has not reached yet lags nothing.
    expect(worstLag({ ...state, oldestVersion: 12 }, 1)).toBe(1);
  });

  it("admits while the worst lag stays within max_staleness, and always when it cannot be told", () => {
    expect(paceAdmits(state, 1)).toBe(true);
    expect(paceAdmits(state, 4)).toBe(false);
    expect(paceAdmits({ ...state, oldestVersion: 7 })).toBe(false);
    expect(paceAdmits({ ...state, oldestVersion: 7, maxStaleness: null })).toBe(true);
    expect(paceAdmits({ ...state, oldestVersion: 7, perVersion: null })).toBe(true);
    expect(paceAdmits({ ...state, oldestVersion: 7, consumerVersion: null })).toBe(true);
  });

  it("lets a batch too big for the bound even alone in once nothing else is outstanding, and only then", () => {
    const empty = { ...state, oldestVersion: null, outstanding: 0, consumedAtVersion: 0 };
    // Twelve begun together: the last would be consumed floor(11 / 4) = 2 versions on, within max_staleness 2.
    expect(paceAdmits(empty, 12)).toBe(true);
    expect(paceAdmitsAlone(empty, 12)).toBe(false);
    // Thirteen break the bound on their own: no consumption or version change could ever admit them.
    expect(paceAdmits(empty, 13)).toBe(false);
    expect(paceAdmitsAlone(empty, 13)).toBe(true);
    expect(paceAdmitsAlone({ ...empty, consumedAtVersion: 4 }, 13)).toBe(true);
    expect(paceAdmitsAlone({ ...empty, outstanding: 1, oldestVersion: 10 }, 13)).toBe(false);
    // A batch the bound takes once the buffer drains waits for that.
    expect(paceAdmitsAlone({ ...empty, consumedAtVersion: 4 }, 10)).toBe(false);
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
    const key = await signClaimKey("secret", { engine: "e1", incarnation: "Ab3_-x9Z", episode_uuid: "ep.1/x", fence: 3 });
    expect(await verifyClaimKey("secret", key)).toEqual({ engine: "e1", incarnation: "Ab3_-x9Z", episode_uuid: "ep.1/x", fence: 3 });
    expect(await verifyClaimKey("other-secret", key)).toBeNull();
    const parts = key.split(".");
    const swap = (i: number, v: string) => parts.map((p, j) => (j === i ? v : p)).join(".");
    expect(await verifyClaimKey("secret", swap(3, "4"))).toBeNull();
    expect(await verifyClaimKey("secret", swap(1, "e2"))).toBeNull();
    // The same claim of another incarnation of the engine (deleted and created again), or of none.
    expect(await verifyClaimKey("secret", swap(2, "Ab3_-x9Y"))).toBeNull();
    expect(await verifyClaimKey("secret", parts.filter((_, j) => j !== 2).join("."))).toBeNull();
    expect(await verifyClaimKey("secret", "sk-ajet-abc")).toBeNull();
  });

  it("remembers a verified key per secret, hands out copies, and never remembers a forgery", async () => {
    const key = await signClaimKey("secret", { engine: "e1", incarnation: "", episode_uuid: "ep-7", fence: 2 });
    const first = await verifyClaimKey("secret", key);
    first!.fence = 99;
    expect(await verifyClaimKey("secret", key)).toEqual({ engine: "e1", incarnation: "", episode_uuid: "ep-7", fence: 2 });
    // Remembered under its own secret only: the same text under another secret is checked, and fails.
    expect(await verifyClaimKey("rotated", key)).toBeNull();
    const forged = `${key.slice(0, -2)}AA`;
    for (let i = 0; i < 3; i++) expect(await verifyClaimKey("secret", forged)).toBeNull();
  });

  it("accepts each key in exactly one spelling", async () => {
    // 10 bytes of episode id and 32 of signature: both end in a partial base64 group, whose last
    // character has spare low bits that atob ignores.
    const key = await signClaimKey("secret", { engine: "e1", incarnation: "", episode_uuid: "ep-0000001", fence: 7 });
    const [head, engine, fence, ep, sig] = key.split(".") as [string, string, string, string, string];
    const join = (...p: string[]) => p.join(".");
    const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const flipLowBit = (s: string) => s.slice(0, -1) + B64[B64.indexOf(s.at(-1)!) ^ 1]!;
    // The flipped spellings decode to the same bytes, which is the defect.
    expect(atob(flipLowBit(sig).replace(/-/g, "+").replace(/_/g, "/"))).toBe(atob(sig.replace(/-/g, "+").replace(/_/g, "/")));
    expect(await verifyClaimKey("secret", key)).not.toBeNull();
    for (const forged of [
      join(head, engine, fence, ep, flipLowBit(sig)),
      join(head, engine, fence, flipLowBit(ep), sig),
      join(head, engine, fence, ep, sig + "="),
      join(head, engine, fence, ep + "==", sig),
      join(head, engine, "07", ep, sig),
      join(head, engine, "7e0", ep, sig),
      join(head, engine, "7.0", ep, sig),
      join(head, engine, "+7", ep, sig),
      join(head, engine, " 7", ep, sig),
      join(head, engine, "0x7", ep, sig),
    ]) {
      expect(await verifyClaimKey("secret", forged), forged).toBeNull();
    }
    // A key with an incarnation signs "<engine>@<incarnation>": the same text as a key without
    // one for the engine named "<engine>@<incarnation>", which no engine can be called.
    const withIncarnation = await signClaimKey("secret", { engine: "e1", incarnation: "Ab3_-x9Z", episode_uuid: "ep-1", fence: 7 });
    const p6 = withIncarnation.split(".");
    expect(await verifyClaimKey("secret", withIncarnation)).not.toBeNull();
    for (const forged of [join(p6[0]!, `${p6[1]}@${p6[2]}`, ...p6.slice(3))]) {
      expect(await verifyClaimKey("secret", forged), forged).toBeNull();
    }
  });

  it("refuses an episode id that is not UTF-8, rather than reading it as U+FFFD", async () => {
    const key = await signClaimKey("secret", { engine: "e1", incarnation: "", episode_uuid: "\uFFFD", fence: 1 });
    const [head, engine, fence, , sig] = key.split(".") as [string, string, string, string, string];
    // 0xFF is not UTF-8; a lenient decoder reads it as the U+FFFD this key was signed for.
    expect(await verifyClaimKey("secret", [head, engine, fence, b64url(new Uint8Array([0xff])), sig].join("."))).toBeNull();
    expect(await verifyClaimKey("secret", key)).toEqual({ engine: "e1", incarnation: "", episode_uuid: "\uFFFD", fence: 1 });
  });

  it("keeps a leading byte order mark as part of the episode id", async () => {
    const key = await signClaimKey("secret", { engine: "e1", incarnation: "", episode_uuid: "x", fence: 1 });
    const [head, engine, fence, , sig] = key.split(".") as [string, string, string, string, string];
    const withBom = b64url(new Uint8Array([0xef, 0xbb, 0xbf, 0x78]));
    expect(await verifyClaimKey("secret", [head, engine, fence, withBom, sig].join("."))).toBeNull();
    const bomKey = await signClaimKey("secret", { engine: "e1", incarnation: "", episode_uuid: "\uFEFFx", fence: 1 });
    expect(await verifyClaimKey("secret", bomKey)).toEqual({ engine: "e1", incarnation: "", episode_uuid: "\uFEFFx", fence: 1 });
  });

  it("keeps the five-part form for engines made before incarnations", async () => {
    const key = await signClaimKey("secret", { engine: "e1", incarnation: "", episode_uuid: "ep-7", fence: 2 });
    expect(key.split(".")).toHaveLength(5);
    expect(await verifyClaimKey("secret", key)).toEqual({ engine: "e1", incarnation: "", episode_uuid: "ep-7", fence: 2 });
  });
});
