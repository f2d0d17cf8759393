/**
 * The engine's gateway secret, fetched from the exchange with the trainer token and kept.
 * The exchange derives it from its CLAIM_KEY_SECRET, the engine's name and incarnation, and a
 * generation that goes up when a trainer token is revoked (docs/relay.md, "Trust"): a rotated
 * secret shows up here as bad signatures. Then the secret is fetched again and the envelope
 * checked once more. Fetches are at least REFRESH_MS apart, so that envelopes a stranger forges
 * cost the exchange little; an envelope that fails within REFRESH_MS of the last fetch waits for
 * the next one rather than being refused, so a rotation just after a fetch refuses no call.
 * A secret MAX_AGE_MS old is fetched again, in the background (the calls go on with the one in
 * hand meanwhile, so a slow exchange stalls none), so that an old secret (a revoked token's
 * holder may have it) is not accepted long after a rotation, even while no call signed with the
 * new one has come; one older than that and ROTATION_GRACE_MS (a gateway idle since) checks no
 * envelope before the fetch is back, and the copy it replaces has its grace counted from when it
 * was due. An exchange that refuses the agent's own token (401, 403: revoked) leaves it no secret
 * at all: every call is refused until a fetch succeeds, tried at most every REFRESH_MS.
 *
 * What a rotation costs: nothing. The first call signed with the new secret fetches it and goes
 * on; the Worker's other isolates sign with the old one for at most a second (FRESH_MS in
 * src/relay/claim-gate.ts), so the secret a fetch replaced is still taken for ROTATION_GRACE_MS.
 */
import { ExchangeError } from "../../../src/client";
import { describeError, type Logger } from "../log";

/** The least time between two fetches of the secret. */
export const REFRESH_MS = 1_000;
/** How long the secret a fetch replaced is still taken: the Worker's isolates all sign with the new one within 1 s. */
export const ROTATION_GRACE_MS = 2_000;
/** A secret fetched this long ago is fetched again before it checks an envelope. */
export const MAX_AGE_MS = 60_000;

/**
 * What an envelope that fails may hold while it waits for the next fetch: its body stays in
 * memory for the second check. `admit` is asked before it waits (false: refused at once);
 * `release` follows the wait.
 */
export type SecretWait = { admit(): boolean; release(): void };

export type SecretSource = {
  /** Runs `verify` (null: good) with the secret; a message starting "the gateway" when there is none yet. */
  check(verify: (secret: string) => Promise<string | null>, wait?: SecretWait): Promise<string | null>;
};

/** A fixed secret (tests, the benchmark's direct runs). */
export function fixedSecret(secret: string): SecretSource {
  return { check: (verify) => verify(secret) };
}

export class FetchedSecret implements SecretSource {
  private secret: string | null = null;
  /** The secret the last fetch replaced, taken until `until`. */
  private previous: { secret: string; until: number } | null = null;
  private fetching: Promise<string | null> | null = null;
  /** When the secret in hand was fetched, and when a fetch was last tried (whether it got one or not). */
  private fetchedAt = Number.NEGATIVE_INFINITY;
  private triedAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly fetchSecret: () => Promise<string>,
    private readonly logger: Logger,
    /**
     * The clock in ms, and a wait on it; tests move it. Monotonic: NTP stepping the host's wall
     * clock back an hour would otherwise keep an old secret an hour, and make a call wait one.
     */
    private readonly now: () => number = () => performance.now(),
    private readonly sleep: (ms: number) => Promise<void> = (ms) => new Promise((r) => setTimeout(r, ms)),
  ) {}

  /** Fetches now (at startup), so the first call does not wait for it. */
  prefetch(): void {
    void this.refresh();
  }

  async check(verify: (secret: string) => Promise<string | null>, wait?: SecretWait): Promise<string | null> {
    const age = this.now() - this.fetchedAt;
    if (this.secret !== null && age >= MAX_AGE_MS && this.mayRefresh()) {
      const fetching = this.refresh();
      // A copy past what it is trusted for (the gateway was idle since it fetched it) checks
      // nothing until the fetch is back: a busy gateway refreshes in the background long before.
      if (age >= MAX_AGE_MS + ROTATION_GRACE_MS) await fetching;
    }
    const secret = this.secret ?? (this.mayRefresh() ? await this.refresh() : null);
    if (secret === null) return "the gateway could not get its engine's secret from the exchange yet; try again";
    const why = await verify(secret);
    if (why !== "bad signature") return why;
    const previous = this.previous;
    if (previous !== null && this.now() < previous.until && (await verify(previous.secret)) === null) return null;
    // Perhaps signed with a secret newer than ours: fetch it, at the next moment a fetch may go.
    // Forged envelopes wait too, as far as `wait` admits them: past that they are refused now.
    if (wait !== undefined && !wait.admit()) return why;
    let fresh: string | null;
    try {
      const tried = this.triedAt;
      if (!this.mayRefresh()) await this.sleep(REFRESH_MS - (this.now() - tried));
      // Waiters woken together make one fetch: the first starts it, the others join it or take what it got.
      fresh = this.fetching !== null || this.triedAt === tried ? await this.refresh() : this.secret;
    } finally {
      wait?.release();
    }
    return fresh === null || fresh === secret ? why : verify(fresh);
  }

  /** Whether a fetch may go now: none tried within REFRESH_MS, or one is on its way already (joined). */
  private mayRefresh(): boolean {
    return this.fetching !== null || this.now() - this.triedAt >= REFRESH_MS;
  }

  private refresh(): Promise<string | null> {
    if (this.fetching !== null) return this.fetching;
    this.triedAt = this.now();
    this.fetching = this.fetchSecret().then(
      (s) => {
        // Taken for the grace after it was replaced, or after it was due to be, whichever came first:
        // a copy kept through an idle hour was replaced, as far as its holders know, long ago.
        if (this.secret !== null && s !== this.secret) this.previous = { secret: this.secret, until: Math.min(this.now(), this.fetchedAt + MAX_AGE_MS) + ROTATION_GRACE_MS };
        this.secret = s;
        this.fetchedAt = this.now();
        this.fetching = null;
        return s;
      },
      (e: unknown) => {
        this.logger.warn(`gateway: cannot fetch the engine's gateway secret: ${describeError(e)}`);
        // The agent's own token refused: the secret in hand may be one a revoked token's holder has.
        if (e instanceof ExchangeError && (e.status === 401 || e.status === 403)) {
          this.secret = null;
          this.previous = null;
        }
        this.fetching = null;
        return this.secret;
      },
    );
    return this.fetching;
  }
}
