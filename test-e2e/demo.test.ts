/**
 * `npm run demo`, short and seeded, in each mode: the real exchange, agent, policy server,
 * trainer and clients, run as the README tells a newcomer to. The policy starts at chance
 * (0.25) and must have learned something within a few steps.
 */
import { spawn } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const DEMO = join(import.meta.dirname, "..", "scripts", "demo", "run.ts");

type Closing = { steps: number; first_mean_reward: number; last_mean_reward: number; episodes: number };

function runDemo(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", DEMO, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (b: Buffer) => (stdout += b.toString("utf8")));
  child.stderr.on("data", (b: Buffer) => (stderr += b.toString("utf8")));
  return new Promise((resolve) => child.on("exit", (code) => resolve({ code, stdout, stderr })));
}

describe("npm run demo", () => {
  for (const mode of ["agentjet", "buffer"] as const) {
    it(`learns in ${mode} mode: the reward rises from chance`, { timeout: 240_000 }, async () => {
      const steps = 12;
      const r = await runDemo(["--mode", mode, "--steps", String(steps), "--seed", "7", "--json"]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).toContain("/dashboard?engine=demo&token=");
      const lines = r.stdout.trim().split("\n");
      const closing = JSON.parse(lines.at(-1)!) as Closing;
      expect(closing.steps).toBe(steps);
      expect(closing.episodes).toBe(steps * 48);
      expect(closing.first_mean_reward).toBeLessThan(0.5);
      expect(closing.last_mean_reward).toBeGreaterThanOrEqual(0.8);
      expect(closing.last_mean_reward).toBeGreaterThan(closing.first_mean_reward);
    });
  }

  it("refuses a bad flag with a message, before starting anything", async () => {
    const r = await runDemo(["--steps", "zero"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("--steps must be an integer >= 1, got 'zero'");
  });
});
