/**
 * `npm run demo`: the whole system doing its job, with real components and a toy model.
 *
 * Starts the exchange (engine `demo`, in memory), the local-agent as its own process, a small
 * OpenAI-compatible policy server, a trainer and N rollout clients, and trains the policy to
 * pick the right tool for a question (see tasks.ts) until the reward climbs from chance (0.25).
 *
 * In AgentJet's mode the trainer speaks AgentJet's protocol through the agent's facade, with a
 * runner per episode that gets the episode's LLM calls and its result over ZeroMQ, and clients
 * call the policy through the exchange's relay with their per-claim keys. In buffer mode, rollout
 * workers ask the policy directly, as slime's do, and post GRPO groups to the rollout buffer
 * (docs/buffer.md): no agent and no relay. Flags: USAGE below (`npm run demo -- --help`).
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { constants, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { AdminClient, EngineClient } from "../../src/client";
import { startLocalExchange, type LocalExchange, type LocalExchangeOptions } from "../local/exchange";
import { AgentProcess } from "./agent-process";
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

const USAGE = `npm run demo -- [--mode agentjet|buffer] [--steps N] [--clients N] [--seed S] [--port P] [--hold] [--json]

Trains a toy policy through the exchange until its reward climbs from chance (0.25).
  --mode agentjet  (default) AgentJet's protocol through the agent's facade, ZeroMQ runners and the relay
  --mode buffer    rollout workers post GRPO groups to the rollout buffer; the trainer pulls them
  --steps N        training steps (20)
  --clients N      rollout clients (8)
  --seed S         the run's seed, 0 to 4294967295 (1)
  --port P         the exchange's port (0: a free one)
  --hold           keep serving the dashboard after training, until Ctrl-C
  --json           print one closing line {"steps", "first_mean_reward", "last_mean_reward", "episodes"}
`;

/** Decimal digits only: Number() takes "" as 0, and " 3 ", "0x10" and "1e3" as numbers too. */
function intArg(name: string, value: string | undefined, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const n = /^\d{1,16}$/.test(value ?? "") ? Number(value) : NaN;
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`--${name} must be an integer ${max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`}, got '${value}'`);
  return n;
}

/** The demo's settings, or null when it was asked for its usage. */
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
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (a.help) return null;
  if (a.mode !== "agentjet" && a.mode !== "buffer") throw new Error(`--mode must be agentjet or buffer, got '${a.mode}'`);
  return {
    mode: a.mode,
    steps: intArg("steps", a.steps, 1),
    clients: intArg("clients", a.clients, 1),
    // The generator keeps 32 bits: a larger seed would be a smaller one's run again.
    seed: intArg("seed", a.seed, 0, 2 ** 32 - 1),
    port: intArg("port", a.port, 0, 65535),
    hold: a.hold,
    json: a.json,
  } as const;
}

const say = (line: string) => void process.stderr.write(`${line}\n`);

type Settings = NonNullable<ReturnType<typeof settings>>;

/** The signals that stop the demo. SIGHUP too: the agent, detached, no longer hears the terminal's. */
const STOP_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;
type StopSignal = (typeof STOP_SIGNALS)[number];

/**
 * The first stop signal. Listening keeps a signal from ending the process at once, before the
 * demo has stopped its agent and removed its files; later ones are ignored, as the stop they
 * ask for is under way (and the agent is killed if it has not exited after a grace).
 */
function firstSignal(): Promise<StopSignal> {
  return new Promise((resolve) => {
    for (const signal of STOP_SIGNALS) process.on(signal, () => resolve(signal));
  });
}

/**
 * Miniflare ends the process on these signals itself (after killing workerd), which would cut
 * the demo's stop short while it waits for the agent to exit: its listeners come off once the
 * exchange is up. Its "exit" hook stays, so workerd still dies with the process however it ends.
 */
async function startExchange(opts: LocalExchangeOptions): Promise<LocalExchange> {
  const before = new Map(STOP_SIGNALS.map((signal) => [signal, process.listeners(signal)]));
  const exchange = await startLocalExchange(opts);
  for (const [signal, ours] of before) {
    for (const listener of process.listeners(signal)) if (!ours.includes(listener)) process.off(signal, listener);
  }
  return exchange;
}

/**
 * What the demo has started, stopped last started first (what writes in the directory before it
 * goes) whichever way the demo ends. On a signal, that runs while the demo's own steps are still
 * under way, so from then on nothing more is started: it would be left behind.
 */
class Teardown {
  private readonly stops: (() => Promise<void> | void)[] = [];
  private done: Promise<void> | undefined;

  get stopping(): boolean {
    return this.done !== undefined;
  }

  start<T>(make: () => T, stop: (thing: T) => Promise<void> | void): T {
    if (this.stopping) throw new Error("the demo is stopping");
    const thing = make();
    this.stops.push(() => stop(thing));
    return thing;
  }

  /** Every stop once, however often called; one that fails does not keep the rest from running. */
  run(): Promise<void> {
    this.done ??= (async () => {
      for (const stop of this.stops.reverse()) {
        try {
          await stop();
        } catch (e) {
          say(`[demo] while stopping: ${e instanceof Error ? e.message : String(e)}`);
        }
      }
    })();
    return this.done;
  }
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

async function runDemo(o: Settings, teardown: Teardown, onHold: () => void): Promise<void> {
  const { mode, steps, clients, seed, port, hold, json } = o;
  const adminToken = randomBytes(18).toString("base64url");
  say(`[demo] starting the exchange (engine '${ENGINE}', state in memory)`);
  // A signal while it starts stops it once it is up: its build would go on writing in the temp
  // directory after the demo had gone. A start that fails has cleaned up after itself.
  const exchange = await teardown.start(
    () => startExchange({ port, persistDir: null, adminToken, claimKeySecret: randomBytes(18).toString("base64url") }),
    async (starting) => (await starting.catch(() => null))?.stop(),
  );
  const policy = new Policy(seeded(seed));
  const policyServer = teardown.start(() => new PolicyServer(policy), (server) => server.close());
  let stop = false;
  const stopped = () => stop || teardown.stopping;
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
    // The agent's state and logs and the runners' ipc sockets; removed once both have stopped.
    const dir = teardown.start(() => mkdtempSync(join(tmpdir(), "rollout-demo-")), (d) => rmSync(d, { recursive: true, force: true }));
    const agent = teardown.start(
      () =>
        new AgentProcess({
          ROLLOUT_SERVER: exchange.url,
          ROLLOUT_ENGINE: ENGINE,
          ROLLOUT_TRAINER_TOKEN: tokens.trainer,
          ROLLOUT_FACADE_PORT: "0",
          ROLLOUT_GATEWAY_PORT: "0",
          ROLLOUT_STATE_DIR: join(dir, "agent-state"),
          ROLLOUT_LOG_DIR: join(dir, "agent-logs"),
        }),
      (a) => a.stop(),
    );
    const facade = await agent.facade;
    say(`[demo] local-agent running: trainer facade on ${facade}`);
    await until("the agent's gateway", async () => ((await as("trainer").overview()).agent.gateway_url ? true : null));
    const trainer = teardown.start(() => new AgentJetTrainer(facade, policy, policyUrl, EPISODES_PER_STEP, dir), (t) => t.stop());
    const client = as("client");
    say(`[demo] training: ${steps} steps of ${EPISODES_PER_STEP} episodes, ${clients} rollout clients claiming through the exchange`);
    const loops = Array.from({ length: clients }, (_, i) => runAgentJetClient(i, client, seeded(seed * 1000 + i), stopped, stats));
    try {
      results = await trainer.run(steps, onStep);
    } finally {
      stop = true;
      await Promise.allSettled(loops);
      await trainer.stop();
    }
  } else {
    const requests = new GroupRequests();
    const groupsPerStep = EPISODES_PER_STEP / GROUP_SIZE;
    say(`[demo] training: ${steps} steps of ${groupsPerStep} groups of ${GROUP_SIZE}, ${clients} rollout workers posting to the buffer`);
    const worker = as("client");
    const loops = Array.from({ length: clients }, (_, i) => runBufferWorker(i, worker, policyUrl, requests, GROUP_SIZE, seeded(seed * 1000 + i), stopped));
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
    onHold();
    await new Promise<never>(() => {});
  }
}

/** The exit code: 0 when the demo ran through (a signal is the way out of --hold), else 128 + the signal's number. */
async function main(): Promise<number> {
  const o = settings();
  if (o === null) {
    process.stdout.write(USAGE);
    return 0;
  }
  const signalled = firstSignal();
  const teardown = new Teardown();
  let held = false;
  const demo = runDemo(o, teardown, () => (held = true));
  // After a signal, the demo's steps fail as what they use is stopped under them: no news.
  demo.catch(() => {});
  try {
    const signal = await Promise.race([demo.then(() => null), signalled]);
    return signal === null || held ? 0 : 128 + constants.signals[signal];
  } finally {
    await teardown.run();
  }
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    console.error(`[demo] failed: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  },
);
