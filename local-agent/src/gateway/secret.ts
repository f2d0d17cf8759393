/**
 * The engine's gateway secret, fetched from the exchange with the trainer token and kept.
 * The exchange derives it from its CLAIM_KEY_SECRET, so a rotated deployment secret shows up
 * here as bad signatures: then the secret is fetched again (at most every REFRESH_MS) and the
 * envelope checked once more.
 */
import { describeError, type Logger } from "../log";

const REFRESH_MS = 30_000;

export type SecretSource = {
  /** Runs `verify` (null: good) with the secret; a message starting "the gateway" when there is none yet. */
  check(verify: (secret: string) => Promise<string | null>): Promise<string | null>;
};

/** A fixed secret (tests, the benchmark's direct runs). */
export function fixedSecret(secret: string): SecretSource {
  return { check: (verify) => verify(secret) };
}

export class FetchedSecret implements SecretSource {
  private secret: string | null = null;
  private fetching: Promise<string | null> | null = null;
  private fetchedAt = 0;

  constructor(
    private readonly fetchSecret: () => Promise<string>,
    private readonly logger: Logger,
  ) {}

  /** Fetches now (at startup), so the first call does not wait for it. */
  prefetch(): void {
    void this.refresh();
  }

  async check(verify: (secret: string) => Promise<string | null>): Promise<string | null> {
    const secret = this.secret ?? (await this.refresh());
    if (secret === null) return "the gateway could not get its engine's secret from the exchange yet; try again";
    const why = await verify(secret);
    if (why !== "bad signature" || Date.now() - this.fetchedAt < REFRESH_MS) return why;
    const fresh = await this.refresh();
    return fresh === null || fresh === secret ? why : verify(fresh);
  }

  private refresh(): Promise<string | null> {
    this.fetching ??= this.fetchSecret().then(
      (s) => {
        this.secret = s;
        this.fetchedAt = Date.now();
        this.fetching = null;
        return s;
      },
      (e: unknown) => {
        this.logger.warn(`gateway: cannot fetch the engine's gateway secret: ${describeError(e)}`);
        this.fetching = null;
        return this.secret;
      },
    );
    return this.fetching;
  }
}
