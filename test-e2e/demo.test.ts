/**
 * `npm run demo`, short and seeded, in each mode: the real exchange, agent, policy server,
 * trainer and clients, run as the README tells a newcomer to. The policy starts at chance
 * (0.25); in AgentJet mode it must pass 0.9 within the two minutes the README promises,
 * counted from the start of the process to its closing line.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { describe, expect, it } from "vitest";
import { EngineClient } from "../src/client";

const DEMO = join(import.meta.dirname, "..", "scripts", "demo", "run.ts");
const EPISODES_PER_STEP = 48;
const CLOSING_KEYS = ["episodes", "first_mean_reward", "last_mean_reward", "steps"];

type Closing = { steps: number; first_mean_reward: number; last_mean_reward: number; episodes: number };
type Run = { child: ChildProcess; stdout: string[]; stderr: string[]; closing: Promise<{ line: string; ms: number }>; exit: Promise<number | null> };

function startDemo(args: string[]): Run {
  const t0 = performance.now();
  const child = spawn(process.execPath, ["--import", "tsx", DEMO, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  const stdout: string[] = [];
  const stderr: string[] = [];
  createInterface({ input: child.stderr! }).on("line", (l) => stderr.push(l));
  // "close", not "exit": every line of its output has been read by then.
  const exit = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
  const closing = new Promise<{ line: string; ms: number }>((resolve, reject) => {
    createInterface({ input: child.stdout! }).on("line", (line) => {
      stdout.push(line);
      if (line.startsWith("{")) resolve({ line, ms: performance.now() - t0 });
    });
    void exit.then((code) => reject(new Error(`the demo exited (${code}) before its closing line:\n${stderr.slice(-20).join("\n")}`)));
  });
  return { child, stdout, stderr, closing, exit };
}

function parseClosing(line: string): Closing {
  const closing = JSON.parse(line) as Closing;
  expect(Object.keys(closing).sort()).toEqual(CLOSING_KEYS);
  return closing;
}

/** The engine as the dashboard URL the demo prints names it, read with that URL's viewer token. */
function viewerOf(stderr: string[]): EngineClient {
  const line = stderr.find((l) => l.includes("/dashboard?engine=demo&token="));
  expect(line, stderr.join("\n")).toBeDefined();
  const url = new URL(/(http:\/\/\S+)/.exec(line!)![1]!);
  return new EngineClient({ baseUrl: `${url.origin}/e/demo`, token: url.searchParams.get("token")! });
}

describe("npm run demo", () => {
  it("learns in agentjet mode: past 0.9 within two minutes, every LLM call relayed to its episode's runner", { timeout: 240_000 }, async () => {
    // The policy passes 0.9 by step 5 or so; at step 15 a step's mean of 48 is ~0.98.
    const steps = 15;
    const run = startDemo(["--mode", "agentjet", "--steps", String(steps), "--seed", "7", "--json", "--hold"]);
    try {
      const { line, ms } = await run.closing;
      const closing = parseClosing(line);
      expect(ms, "wall time from start to the closing line").toBeLessThanOrEqual(120_000);
      expect(closing.steps).toBe(steps);
      expect(closing.episodes).toBe(steps * EPISODES_PER_STEP);
      expect(closing.first_mean_reward).toBeLessThan(0.5);
      expect(closing.last_mean_reward).toBeGreaterThanOrEqual(0.9);

      // Each runner counts the calls that reached its LLM socket: the address is in the
      // episode's sk-ajet- key, which only the agent's gateway is given, inside envelopes the
      // Worker signs for a live claim's per-claim key. So every call came through the relay.
      const perStep = run.stderr.flatMap((l) => {
        const m = /\((\d+) rollouts, (\d+) LLM calls relayed to the runners/.exec(l);
        return m ? [{ rollouts: Number(m[1]), relayed: Number(m[2]) }] : [];
      });
      expect(perStep).toHaveLength(steps);
      expect(perStep.every((s) => s.relayed === s.rollouts)).toBe(true);
      expect(perStep.reduce((a, s) => a + s.relayed, 0)).toBe(closing.episodes);

      // The exchange's own count of the episodes ended at each step matches the runners' calls.
      const { history } = await viewerOf(run.stderr).getRewardHistory();
      expect(history.map((h) => h.count)).toEqual(perStep.map((s) => s.relayed));
    } finally {
      run.child.kill("SIGINT");
    }
    // Ctrl-C ends --hold, and the demo stops its agent, policy server and exchange.
    expect(await run.exit).toBe(0);
  });

  it("learns in buffer mode, with --clients 3: the reward rises from chance", { timeout: 240_000 }, async () => {
    const steps = 12;
    const run = startDemo(["--mode", "buffer", "--steps", String(steps), "--clients", "3", "--seed", "7", "--json"]);
    const closing = parseClosing((await run.closing).line);
    expect(await run.exit, run.stderr.join("\n")).toBe(0);
    expect(run.stderr.join("\n")).toContain("/dashboard?engine=demo&token=");
    expect(run.stderr.join("\n")).toContain("3 rollout workers posting to the buffer");
    expect(closing.steps).toBe(steps);
    expect(closing.episodes).toBe(steps * EPISODES_PER_STEP);
    expect(closing.first_mean_reward).toBeLessThan(0.5);
    expect(closing.last_mean_reward).toBeGreaterThanOrEqual(0.8);
    expect(closing.last_mean_reward).toBeGreaterThan(closing.first_mean_reward);
  });

  it("refuses a bad flag with a message, before starting anything", async () => {
    const run = startDemo(["--steps", "zero"]);
    run.closing.catch(() => {});
    expect(await run.exit).toBe(1);
    expect(run.stderr.join("\n")).toContain("--steps must be an integer >= 1, got 'zero'");
    // A port past 65535 too: it reached workerd, which blamed its binary for it.
    const port = startDemo(["--port", "65536"]);
    port.closing.catch(() => {});
    expect(await port.exit).toBe(1);
    expect(port.stderr.join("\n")).toBe("[demo] failed: --port must be an integer from 0 to 65535, got '65536'");
    // What Number() took for numbers: "" as 0 (--seed= ran seed 0), " 3 ", hex; and a seed past
    // the generator's 32 bits, which ran a smaller seed's run again (2^32 + 1 was seed 1).
    for (const [args, said] of [
      [["--seed="], "--seed must be an integer from 0 to 4294967295, got ''"],
      [["--port="], "--port must be an integer from 0 to 65535, got ''"],
      [["--steps", " 3 "], "--steps must be an integer >= 1, got ' 3 '"],
      [["--clients", "0x10"], "--clients must be an integer >= 1, got '0x10'"],
      [["--seed", String(2 ** 32 + 1)], "--seed must be an integer from 0 to 4294967295, got '4294967297'"],
    ] as const) {
      const bad = startDemo([...args]);
      bad.closing.catch(() => {});
      expect(await bad.exit).toBe(1);
      expect(bad.stderr.join("\n")).toBe(`[demo] failed: ${said}`);
    }
  });

  it("answers --help with its usage, naming every flag, and starts nothing", async () => {
    const run = startDemo(["--help"]);
    run.closing.catch(() => {});
    expect(await run.exit).toBe(0);
    expect(run.stderr).toEqual([]);
    const usage = run.stdout.join("\n");
    for (const flag of ["--mode", "--steps", "--clients", "--seed", "--port", "--hold", "--json"]) expect(usage).toContain(flag);
  });
});
