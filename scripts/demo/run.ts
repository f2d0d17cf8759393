/**
 * `npm run demo`: the whole system doing its job, with real components and a toy model.
 *
 * Starts the exchange (engine `demo`, in memory), the local-agent as its own process, a small
 * OpenAI-compatible policy server, a trainer and N rollout clients, and trains the policy to
 * pick the right tool for a question (see tasks.ts) until the reward climbs from chance (0.25).
 *
 *   --mode agentjet   (default) the trainer speaks AgentJet's protocol through the agent's
 *                     facade, with a runner per episode that gets the episode's LLM calls and
 *                     its result over ZeroMQ; clients claim episodes and call the policy through
 *                     the exchange's relay with their per-claim keys
 *   --mode buffer     rollout workers post GRPO groups to the rollout buffer (/steps) and the
 *                     trainer pulls them with get_rollout_data; no agent and no relay: the
 *                     workers ask the policy directly, as slime's do (docs/buffer.md)
 *   --steps N (20)  --clients N (8)  --seed S (1)  --port P (0: a free one)
 *   --hold            keep serving the dashboard after training, until Ctrl-C
 *   --json            print one closing line {"steps", "first_mean_reward", "last_mean_reward", "episodes"}
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { AdminClient, EngineClient } from "../../src/client";
import { REPO_ROOT, startLocalExchange } from "../local/exchange";
import { AgentJetTrainer, type StepResult } from "./agentjet-trainer";
import { runAgentJetClient, type ClientStats } from "./agentjet-clients";
import { GroupRequests, runBufferTrainer, runBufferWorker } from "./buffer-mode";
import { Policy, PolicyServer } from "./policy";
import { seeded } from "./rng";
import { TOOLS } from "./tasks";
import { rewardBar, sparkline } from "./progress";

const ENGINE = "demo";
/** AgentJet mode: episodes the trainer registers per step. Buffer mode: groups per step x their size. */
const EPISODES_PER_STEP = 48;
const GROUP_SIZE = 6;

function intArg(name: string, value: string | undefined, min: number): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer >= ${min}, got '${value}'`);
  return n;
}

function settings() {
  const { values: a } = parseArgs({
    options: {
      mode: { type: "string", default: "agentjet" },
      steps: { type: "string", default: "20" },
      clients: { type: "string", default: "8" },
      seed: { type: "string", default: "1" },
      port: { type: "string", default: "0" },
      hold: { type: "boolean", default: false },
      json: { type: "boolean", default: false },
    },
  });
  if (a.mode !== "agentjet" && a.mode !== "buffer") throw new Error(`--mode must be agentjet or buffer, got '${a.mode}'`);
  return {
    mode: a.mode,
    steps: intArg("steps", a.steps, 1),
    clients: intArg("clients", a.clients, 1),
    seed: intArg("seed", a.seed, 0),
    port: intArg("port", a.port, 0),
    hold: a.hold,
    json: a.json,
  } as const;
}

const say = (line: string) => void process.stderr.write(`${line}\n`);

/** The agent's CLI in its own process, as on a GPU host; resolves with its facade's URL. */
function startAgent(env: Record<string, string>): Promise<{ child: ChildProcess; facade: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", join(REPO_ROOT, "local-agent", "src", "cli.ts")], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: string[] = [];
  return new Promise((resolve, reject) => {
    const onLine = (l: string) => {
      lines.push(l);
      const m = /trainer facade on (http:\/\/[^\s;,]+)/.exec(l);
      if (m) resolve({ child, facade: m[1] as string });
    };
    createInterface({ input: child.stderr! }).on("line", onLine);
    createInterface({ input: child.stdout! }).on("line", onLine);
    child.on("exit", (code, signal) => reject(new Error(`the agent exited (${code ?? signal}):\n${lines.slice(-20).join("\n")}`)));
  });
}

async function until<T>(what: string, probe: () => Promise<T | null>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== null) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function main(): Promise<void> {
  const { mode, steps, clients, seed, port, hold, json } = settings();
  const dir = mkdtempSync(join(tmpdir(), "rollout-demo-"));
  const adminToken = randomBytes(18).toString("base64url");
  let agent: ChildProcess | null = null;
  let held = false;
  // Ctrl-C ends the process at once (Miniflare's own handler would too, skipping the cleanup
  // below): stop the agent and remove the demo's files first. After training under --hold,
  // that is the way out and no failure.
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.on(signal, () => {
      agent?.kill("SIGTERM");
      rmSync(dir, { recursive: true, force: true });
      process.exit(held ? 0 : 130);
    });
  }
  say(`[demo] starting the exchange (engine '${ENGINE}', state in memory)`);
  const exchange = await startLocalExchange({ port, persistDir: null, adminToken, claimKeySecret: randomBytes(18).toString("base64url") });
  const policy = new Policy(seeded(seed));
  const policyServer = new PolicyServer(policy);
  let stop = false;
  try {
    const { tokens } = await new AdminClient({ origin: exchange.url, adminToken }).createEngine(ENGINE);
    const baseUrl = `${exchange.url}/e/${ENGINE}`;
    const as = (role: keyof typeof tokens) => new EngineClient({ baseUrl, token: tokens[role] });
    const policyUrl = await policyServer.listen();
    say(`[demo] policy server (a table of logits over ${TOOLS.length} tools) on ${policyUrl}`);
    say(`[demo] dashboard: ${exchange.url}/dashboard?engine=${ENGINE}&token=${encodeURIComponent(tokens.viewer)}`);

    const relayed = (r: StepResult) => (r.relayedCalls === undefined ? "" : `, ${r.relayedCalls} LLM calls relayed to the runners`);
    const onStep = (r: StepResult) =>
      say(`[demo] step ${String(r.step).padStart(3)}/${steps}  mean reward ${r.meanReward.toFixed(2)} ${rewardBar(r.meanReward)}  (${r.episodes} rollouts${relayed(r)}, ${r.seconds.toFixed(1)} s)`);
    const stats: ClientStats = { episodes: 0, llmCalls: 0, errors: 0 };
    let results: StepResult[];
    if (mode === "agentjet") {
      const started = await startAgent({
        ROLLOUT_SERVER: exchange.url,
        ROLLOUT_ENGINE: ENGINE,
        ROLLOUT_TRAINER_TOKEN: tokens.trainer,
        ROLLOUT_FACADE_PORT: "0",
        ROLLOUT_GATEWAY_PORT: "0",
        ROLLOUT_STATE_DIR: join(dir, "agent-state"),
        ROLLOUT_LOG_DIR: join(dir, "agent-logs"),
      });
      agent = started.child;
      say(`[demo] local-agent running: trainer facade on ${started.facade}`);
      const viewer = as("viewer");
      await until("the agent's gateway", async () => ((await viewer.overview()).agent.gateway_url ? true : null));
      const trainer = new AgentJetTrainer(started.facade, policy, policyUrl, EPISODES_PER_STEP, dir);
      const client = as("client");
      say(`[demo] training: ${steps} steps of ${EPISODES_PER_STEP} episodes, ${clients} rollout clients claiming through the exchange`);
      const loops = Array.from({ length: clients }, (_, i) => runAgentJetClient(i, client, seeded(seed * 1000 + i), () => stop, stats));
      try {
        results = await trainer.run(steps, onStep);
      } finally {
        stop = true;
        await Promise.allSettled(loops);
        trainer.close();
      }
    } else {
      const requests = new GroupRequests();
      const groupsPerStep = EPISODES_PER_STEP / GROUP_SIZE;
      say(`[demo] training: ${steps} steps of ${groupsPerStep} groups of ${GROUP_SIZE}, ${clients} rollout workers posting to the buffer`);
      const worker = as("client");
      const loops = Array.from({ length: clients }, (_, i) => runBufferWorker(i, worker, policyUrl, requests, GROUP_SIZE, seeded(seed * 1000 + i), () => stop));
      try {
        results = await runBufferTrainer(as("trainer"), policy, requests, { steps, groupsPerStep, groupSize: GROUP_SIZE }, onStep);
      } finally {
        stop = true;
        await Promise.allSettled(loops);
      }
      stats.episodes = results.reduce((a, r) => a + r.episodes, 0);
    }

    // The curve as the exchange recorded it: reward history (AgentJet) or the pulls' own means.
    const curve = mode === "agentjet" ? (await as("viewer").getRewardHistory()).history.map((h) => h.mean_reward) : results.map((r) => r.meanReward);
    const first = curve[0] ?? 0;
    const last = curve.at(-1) ?? 0;
    say(`[demo] reward ${sparkline(curve)}  ${first.toFixed(2)} -> ${last.toFixed(2)} over ${curve.length} steps (chance: ${(1 / TOOLS.length).toFixed(2)})`);
    if (json) console.log(JSON.stringify({ steps: curve.length, first_mean_reward: first, last_mean_reward: last, episodes: stats.episodes }));
    if (hold) {
      say(`[demo] the dashboard stays up at ${exchange.url}/dashboard?engine=${ENGINE}&token=${encodeURIComponent(tokens.viewer)}; Ctrl-C to stop`);
      held = true;
      await new Promise<never>(() => {});
    }
  } finally {
    stop = true;
    agent?.kill("SIGTERM");
    await policyServer.close();
    await exchange.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error(`[demo] failed: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
});
