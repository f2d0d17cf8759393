declare namespace Cloudflare {
  interface Env {
    TEST_MIGRATIONS: import("cloudflare:test").D1Migration[];
    /** The fuzz suite's number of runs, seed and path to replay, and the targets it keeps to; "" when not set (vitest.config.ts). */
    FUZZ_RUNS: string;
    FUZZ_SEED: string;
    FUZZ_PATH: string;
    FUZZ_ONLY: string;
  }
}
