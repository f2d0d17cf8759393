/**
 * docs/relay.md, "Trust": a revoked token's holder who has the old secret "can use it until the
 * gateway has fetched the new one (at the first call signed with it, or a minute at most) and 2 s
 * more", "even while no call comes". The refresh was started only by a call, which was then
 * checked against the copy in hand: ten minutes after a rotation on an idle gateway, the old
 * secret was accepted. A copy past that bound now waits for its fetch, and the copy a fetch
 * replaces has its grace counted from when it was due, not from the fetch.
 *
 * The clock is faked (Date, performance, timers), as in secret.test.ts.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { FetchedSecret, REFRESH_MS, ROTATION_GRACE_MS } from "../../src/gateway/secret";
import { silentLogger } from "../../src/log";

/** An envelope signed with `signedWith`, as the gateway checks it: good only with that secret. */
const signedWith = (signedWith: string) => async (secret: string) => (secret === signedWith ? null : "bad signature");

afterEach(() => {
  vi.useRealTimers();
});

describe("gateway: its engine's secret after a rotation while no call came", () => {
  it("does not accept the old secret ten minutes after the rotation, though the gateway was idle meanwhile", async () => {
    vi.useFakeTimers({ toFake: ["Date", "performance", "setTimeout", "clearTimeout", "setInterval", "clearInterval"] });
    const ex = { secret: "s0", fetches: 0 };
    const secret = new FetchedSecret(async () => {
      ex.fetches++;
      return ex.secret;
    }, silentLogger);
    secret.prefetch();
    await vi.advanceTimersByTimeAsync(10);
    // The Worker's calls, signed with s0.
    expect(await secret.check(signedWith("s0"))).toBeNull();
    // A trainer token is revoked: the exchange serves s1 from now on. No call comes for ten minutes.
    ex.secret = "s1";
    await vi.advanceTimersByTimeAsync(10 * 60_000);
    // The revoked token's holder signs with s0: far past "a minute at most" and the 2 s grace.
    const forged = secret.check(signedWith("s0"));
    await vi.advanceTimersByTimeAsync(REFRESH_MS + ROTATION_GRACE_MS);
    expect(await forged).toBe("bad signature");
    // The Worker's own calls, signed with s1, go on.
    const good = secret.check(signedWith("s1"));
    await vi.advanceTimersByTimeAsync(REFRESH_MS);
    expect(await good).toBeNull();
  });
});
