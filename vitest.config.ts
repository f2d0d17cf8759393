import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

// Four projects, one `npm test`: the Worker's tests run inside workerd against real D1 and real
// Durable Objects; the local-agent's tests run in Node (real child processes, real ZeroMQ); the
// dashboard's and API reference's tests drive a real headless Chromium against the local Worker.
export default defineConfig(async () => {
  const migrations = await readD1Migrations("./migrations");
  return {
    test: {
      projects: [
        {
          plugins: [
            cloudflareTest({
              wrangler: { configPath: "./wrangler.toml" },
              miniflare: {
                bindings: {
                  ADMIN_TOKEN: "test-admin-token",
                  CLAIM_KEY_SECRET: "test-claim-key-secret",
                  TEST_MIGRATIONS: migrations,
                  // The fuzz suite's knobs (test/fuzz/requests.test.ts): more runs, or a failing seed to replay.
                  FUZZ_RUNS: process.env["FUZZ_RUNS"] ?? "",
                  FUZZ_SEED: process.env["FUZZ_SEED"] ?? "",
                  FUZZ_PATH: process.env["FUZZ_PATH"] ?? "",
                  FUZZ_ONLY: process.env["FUZZ_ONLY"] ?? "",
                },
              },
            }),
          ],
          test: {
            name: "worker",
            include: ["test/**/*.test.ts"],
            // Tests that drive hundreds of requests through workerd take seconds on a loaded 2-core machine.
            testTimeout: 30_000,
            setupFiles: ["./test/support/apply-migrations.ts"],
          },
        },
        {
          test: {
            name: "agent",
            environment: "node",
            include: ["local-agent/test/**/*.test.ts"],
            // Real processes, sockets and a local Worker: give slow machines room.
            testTimeout: 60_000,
            hookTimeout: 120_000,
          },
        },
        {
          test: {
            name: "e2e",
            environment: "node",
            include: ["test-e2e/**/*.test.ts"],
            // The real Worker on Miniflare, real sockets: give a loaded 2-core machine room.
            testTimeout: 60_000,
            hookTimeout: 180_000,
          },
        },
        {
          test: {
            name: "browser",
            environment: "node",
            include: ["test-browser/**/*.test.ts"],
            // Each file runs its own Worker (Miniflare) and Chromium; one file at a time keeps a
            // 2-core machine from timing out, and the pages' timings honest. A later group, so
            // Chromium's load does not land on the agent's timing-sensitive end-to-end tests.
            fileParallelism: false,
            sequence: { groupOrder: 1 },
            testTimeout: 60_000,
            hookTimeout: 180_000,
          },
        },
      ],
    },
  };
});
