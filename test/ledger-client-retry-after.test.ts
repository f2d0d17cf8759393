/**
 * LedgerClient's export() and media() refusals carry the Retry-After seconds as the JSON reads'
 * do (docs/operations.md, "Refusals to retry": the clients throw an ExchangeError "with the code
 * and `retryAfterSeconds`, the header's seconds"). They built their errors apart from http.ts's
 * jsonAnswer and read no header: a rate-limited export said nothing of when to try again.
 */
import { describe, expect, it } from "vitest";
import { ExchangeError, LedgerClient } from "../src/client";
import { RATE_LIMIT_PERIOD_SECONDS } from "../src/http/rate-limit";
import { createEngine, ORIGIN, workerFetch } from "./support/harness";
import { inOneWindow } from "./support/rate-limit";

describe("LedgerClient refusals", () => {
  it("keep Retry-After on export() and media() as on trajectory()", async () => {
    const e = await createEngine("ledger-429");
    const ledger = new LedgerClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens.viewer, fetch: workerFetch });
    await inOneWindow(e, e.tokens.viewer, async () => {
      // The same refusal through the JSON path: the header's seconds are kept.
      const read = await ledger.trajectory("ep-1").catch((x: unknown) => x);
      expect(read).toBeInstanceOf(ExchangeError);
      expect(read).toMatchObject({ status: 429, code: "rate_limited", retryAfterSeconds: RATE_LIMIT_PERIOD_SECONDS });

      const exported = await (async () => {
        for await (const _t of ledger.export()) {
          // nothing: the export is refused before its first line
        }
      })().catch((x: unknown) => x);
      expect(exported).toBeInstanceOf(ExchangeError);
      expect(exported).toMatchObject({ status: 429, code: "rate_limited", retryAfterSeconds: RATE_LIMIT_PERIOD_SECONDS });

      const medium = await ledger.media("a".repeat(64)).catch((x: unknown) => x);
      expect(medium).toBeInstanceOf(ExchangeError);
      expect(medium).toMatchObject({ status: 429, code: "rate_limited", retryAfterSeconds: RATE_LIMIT_PERIOD_SECONDS });
    });
  }, 90_000);
});
