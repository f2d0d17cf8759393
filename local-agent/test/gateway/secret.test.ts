/**
 * The gateway's copy of its engine's secret (src/gateway/secret.ts) across a rotation: the
 * exchange moves the secret on when a trainer token is revoked (docs/relay.md, "Trust"), and the
 * Worker signs with the new one within a second. The clock is the test's.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { ExchangeError } from "../../../src/client";
import { FetchedSecret, MAX_AGE_MS, REFRESH_MS, ROTATION_GRACE_MS } from "../../src/gateway/secret";
import { silentLogger } from "../../src/log";

/** The exchange's side: the secret it serves now, and how often it was asked. */
function exchange(first: string) {
  const ex = { secret: first, fetches: 0, down: false, refusing: false };
  const fetchSecret = async (): Promise<string> => {
    ex.fetches++;
    if (ex.down) throw new Error("connect ECONNREFUSED");
    if (ex.refusing) throw new ExchangeError(401, "invalid_token", "The token is not valid for engine 'e' (unknown or revoked).");
    return ex.secret;
  };
  return { ex, fetchSecret };
}

/** Lets a fetch started in the background settle. */
const settled = (): Promise<void> => new Promise((r) => setImmediate(r));

/** A gateway's secret on the test's clock (a wait moves it), fetched from an exchange serving `first`. */
function fetched(first: string) {
  const clock = { t: 1_000_000 };
  const { ex, fetchSecret } = exchange(first);
  const sleep = async (ms: number): Promise<void> => {
    clock.t += ms;
  };
  return { clock, ex, secret: new FetchedSecret(fetchSecret, silentLogger, () => clock.t, sleep) };
}

/** An envelope signed with `signedWith`, as the gateway checks it: good only with that secret. */
const signedWith = (signedWith: string) => async (secret: string) => (secret === signedWith ? null : "bad signature");

describe("gateway: its engine's secret across a rotation", () => {
  it("takes the new secret at the first call signed with it, and the old one for ROTATION_GRACE_MS more, while the Worker's other isolates still sign with it", async () => {
    const { clock, ex, secret } = fetched("s0");
    expect(await secret.check(signedWith("s0"))).toBeNull();
    clock.t += 10_000;
    // A trainer token is revoked: the exchange serves s1, and the Worker signs with it.
    ex.secret = "s1";
    expect(await secret.check(signedWith("s1"))).toBeNull();
    expect(ex.fetches).toBe(2);
    // For up to a second, another isolate of the Worker still signs with s0: served, and no fetch for each.
    clock.t += ROTATION_GRACE_MS - 1;
    for (let i = 0; i < 5; i++) expect(await secret.check(signedWith("s0"))).toBeNull();
    expect(ex.fetches).toBe(2);
    // Past the grace, s0 is refused (after one more fetch, which finds nothing newer).
    clock.t += 1;
    expect(await secret.check(signedWith("s0"))).toBe("bad signature");
    expect(await secret.check(signedWith("s0"))).toBe("bad signature");
    expect(await secret.check(signedWith("s1"))).toBeNull();
  });

  it("makes a call signed just after a fetch wait for the next fetch rather than refusing it, and lets forged envelopes cost one fetch per REFRESH_MS", async () => {
    const clock = { t: 1_000_000 };
    const slept: number[] = [];
    const { ex, fetchSecret } = exchange("s0");
    const sleep = async (ms: number): Promise<void> => {
      slept.push(ms);
      clock.t += ms;
    };
    const secret = new FetchedSecret(fetchSecret, silentLogger, () => clock.t, sleep);
    secret.prefetch();
    expect(await secret.check(signedWith("s0"))).toBeNull();
    clock.t += REFRESH_MS;
    // A stranger's forgery: one fetch, which finds nothing newer.
    expect(await secret.check(signedWith("forged"))).toBe("bad signature");
    expect(ex.fetches).toBe(2);
    // The rotation comes 300 ms after that fetch: its first call waits the rest of REFRESH_MS, then is served.
    ex.secret = "s1";
    clock.t += 300;
    expect(await secret.check(signedWith("s1"))).toBeNull();
    expect(slept).toEqual([REFRESH_MS - 300]);
    expect(ex.fetches).toBe(3);
    // Forgeries one after another: each waits its turn, one fetch per REFRESH_MS.
    const from = clock.t;
    for (let i = 0; i < 10; i++) expect(await secret.check(signedWith("forged"))).toBe("bad signature");
    expect(ex.fetches - 3).toBe(10);
    expect(clock.t - from).toBe(10 * REFRESH_MS);
  });

  it("makes the calls that wait together for a fetch share it", async () => {
    const clock = { t: 1_000_000 };
    const wakes: (() => void)[] = [];
    const { ex, fetchSecret } = exchange("s0");
    const sleep = (): Promise<void> => new Promise((r) => wakes.push(r));
    const secret = new FetchedSecret(fetchSecret, silentLogger, () => clock.t, sleep);
    expect(await secret.check(signedWith("s0"))).toBeNull();
    ex.secret = "s1";
    const calls = Array.from({ length: 10 }, () => secret.check(signedWith("s1")));
    await settled();
    expect(wakes).toHaveLength(10);
    clock.t += REFRESH_MS;
    for (const wake of wakes) wake();
    expect(await Promise.all(calls)).toEqual(Array(10).fill(null));
    expect(ex.fetches).toBe(2);
  });

  it("fetches a secret MAX_AGE_MS old again in the background: an old secret's holder is refused once it came, though no new call did", async () => {
    const { clock, ex, secret } = fetched("s0");
    expect(await secret.check(signedWith("s0"))).toBeNull();
    ex.secret = "s1";
    clock.t += MAX_AGE_MS - 1;
    // Still the secret in hand: within MAX_AGE_MS of its fetch, the old one is taken.
    expect(await secret.check(signedWith("s0"))).toBeNull();
    expect(ex.fetches).toBe(1);
    clock.t += 1;
    // This call goes on with the copy in hand while the fetch is under way; the calls after it have the new one.
    expect(await secret.check(signedWith("s0"))).toBeNull();
    expect(ex.fetches).toBe(2);
    await settled();
    expect(await secret.check(signedWith("s1"))).toBeNull();
    expect(ex.fetches).toBe(2);
    // The Worker's other isolates may have signed with s0 up to a second ago: taken for ROTATION_GRACE_MS.
    clock.t += ROTATION_GRACE_MS;
    expect(await secret.check(signedWith("s0"))).toBe("bad signature");
  });

  it("stalls no call on a slow exchange once its copy is MAX_AGE_MS old", async () => {
    const clock = { t: 1_000_000 };
    let hang = false;
    const secret = new FetchedSecret(() => (hang ? new Promise<string>(() => {}) : Promise.resolve("s0")), silentLogger, () => clock.t);
    expect(await secret.check(signedWith("s0"))).toBeNull();
    hang = true;
    clock.t += MAX_AGE_MS;
    // It waited for the exchange's answer, as long as the agent's request timeout.
    expect(await secret.check(signedWith("s0"))).toBeNull();
  });

  it("refuses every call once the exchange refuses the agent's own token (revoked): the secret in hand may be a revoked token holder's", async () => {
    const { clock, ex, secret } = fetched("s0");
    expect(await secret.check(signedWith("s0"))).toBeNull();
    // The agent's trainer token is revoked: the exchange moves on to s1 and answers the agent 401.
    ex.refusing = true;
    clock.t += MAX_AGE_MS;
    await secret.check(signedWith("s0"));
    await settled();
    // The old copy was kept for ever, and the leaked token's holder, who has s0, let in.
    expect(await secret.check(signedWith("s0"))).toMatch(/could not get its engine's secret/);
    expect(ex.fetches).toBe(2);
    // Without a secret, a fetch at most every REFRESH_MS: forged envelopes cost the exchange little.
    for (let i = 0; i < 10; i++) expect(await secret.check(signedWith("forged"))).toMatch(/could not get/);
    expect(ex.fetches).toBe(2);
    clock.t += REFRESH_MS;
    ex.refusing = false;
    ex.secret = "s2";
    expect(await secret.check(signedWith("s2"))).toBeNull();
    expect(ex.fetches).toBe(3);
  });

  it("keeps serving with the secret in hand while the exchange cannot be reached, asking it at most once per REFRESH_MS", async () => {
    const { clock, ex, secret } = fetched("s0");
    expect(await secret.check(signedWith("s0"))).toBeNull();
    ex.down = true;
    clock.t += MAX_AGE_MS;
    for (let i = 0; i < 10; i++) expect(await secret.check(signedWith("s0"))).toBeNull();
    expect(ex.fetches).toBe(2);
    clock.t += REFRESH_MS;
    expect(await secret.check(signedWith("s0"))).toBeNull();
    expect(ex.fetches).toBe(3);
  });

  describe("on the host's clocks", () => {
    afterEach(() => {
      vi.useRealTimers();
    });

    it("measures ages on a monotonic clock: NTP stepping the wall clock back an hour stretches neither the copy's age nor a call's wait", async () => {
      vi.useFakeTimers({ toFake: ["Date", "performance", "setTimeout"] });
      const t0 = Date.UTC(2026, 0, 1, 12);
      vi.setSystemTime(t0);
      const { ex, fetchSecret } = exchange("s0");
      const secret = new FetchedSecret(fetchSecret, silentLogger);
      expect(await secret.check(signedWith("s0"))).toBeNull();
      // chrony corrects a host clock that ran an hour fast: Date goes back, performance.now() does not.
      vi.setSystemTime(t0 - 3_600_000);
      await vi.advanceTimersByTimeAsync(MAX_AGE_MS);
      expect(await secret.check(signedWith("s0"))).toBeNull();
      await settled();
      // The copy was a minute old, by the clock that does not step: fetched again.
      expect(ex.fetches).toBe(2);
      // A rotation right after that fetch: its first call waits for the next fetch, a second at most.
      ex.secret = "s1";
      const call = secret.check(signedWith("s1"));
      await vi.advanceTimersByTimeAsync(REFRESH_MS);
      expect(await call).toBeNull();
      expect(ex.fetches).toBe(3);
    });
  });
});
