/**
 * Every setting of the agent, described once: its config-file key, command-line flag,
 * environment variable, default and meaning. The parser, the environment reader and `--help`
 * are all generated from this table, so they cannot drift apart.
 */
import { z } from "zod";
import { EngineName, TokenDialect } from "../../src/protocol";
import { DEFAULT_HISTORY_BYTES } from "./ledger/recorder";
import { DEFAULT_QUEUE_BYTES } from "./ledger/shipper";
import { BACKLOG_PER_DELIVERY_SLOT, DEFAULT_DELIVERY_QUEUE_BYTES } from "./command-loop";

/**
 * A number from the config file, or from a flag's or variable's text. Not z.coerce: Number()
 * makes "" and null 0 (a trainer killed with no grace, a random facade port), true 1 and [5] 5.
 */
const numeric = (n: z.ZodNumber) => z.preprocess((v) => (typeof v === "string" && v.trim() !== "" ? Number(v) : v), n);
const seconds = (min: number, max: number) => numeric(z.number().min(min, `must be at least ${min}`).max(max, `must be at most ${max}`));
const port = numeric(z.number().int("must be a whole number").min(0, "must be 0-65535").max(65535, "must be 0-65535"));
const positiveInt = (max: number) => numeric(z.number().int("must be a whole number").min(1, "must be at least 1").max(max, `must be at most ${max}`));

const httpUrl = z
  .string()
  // abort: zod runs the checks after a failed one too, and `new URL` throws on a non-URL.
  .url({ message: "must be a URL such as https://exchange.example.com", abort: true })
  .refine((u) => /^https?:$/.test(new URL(u).protocol), "must start with http:// or https://")
  // The agent adds paths to each (/e/<engine>/..., /admin/clear_sessions): after a query or fragment they would be part of it.
  .refine((u) => new URL(u).search === "" && new URL(u).hash === "", "must carry no query (?...) or fragment (#...): the agent adds paths to it")
  .transform((u) => u.replace(/\/+$/, ""));

/** A trainer command: a template string split like a shell would, or an argv array. */
const trainerCommand = z.union([
  z.string().trim().min(1, "must not be empty"),
  z.array(z.string()).refine((argv) => (argv[0] ?? "").trim() !== "", "must name a program first"),
]);

export type OptionSpec = {
  flag: string;
  env: string;
  schema: z.ZodType;
  /** Shown as the value's placeholder in --help. */
  arg: string;
  describe: string;
  default?: unknown;
  required?: boolean;
  /** Secrets are never printed back (--print-config, error messages). */
  secret?: boolean;
};

export const OPTIONS = {
  server: {
    flag: "--server",
    env: "ROLLOUT_SERVER",
    schema: httpUrl,
    arg: "URL",
    required: true,
    describe: "Origin of the Rollout Exchange Worker, e.g. https://rollout.example.com (no /e/<engine>).",
  },
  engine: {
    flag: "--engine",
    env: "ROLLOUT_ENGINE",
    schema: EngineName,
    arg: "NAME",
    required: true,
    describe: "The engine this agent serves; its commands are read from <server>/e/<engine>.",
  },
  token: {
    flag: "--token",
    env: "ROLLOUT_TRAINER_TOKEN",
    schema: z.string().min(1, "must not be empty"),
    arg: "TOKEN",
    required: true,
    secret: true,
    describe: "The engine's trainer token. Prefer the environment or the config file: flags show up in `ps`.",
  },
  trainerCommand: {
    flag: "--trainer-command",
    env: "ROLLOUT_TRAINER_COMMAND",
    schema: trainerCommand,
    arg: "CMD",
    describe:
      "Command started by the engine's start command, e.g. 'ajet --conf {config}'. Placeholders: {config} (the synced " +
      "training YAML, written to <stateDir>/train-config.yaml), {facade_url}, {facade_port}, {engine}. Split like a shell " +
      "splits words (quotes work; no pipes or variables: use `sh -c '...'` for those). Unset: start commands are refused.",
  },
  trainerCwd: {
    flag: "--trainer-cwd",
    env: "ROLLOUT_TRAINER_CWD",
    schema: z.string().min(1),
    arg: "DIR",
    describe: "Working directory of the trainer (default: the agent's).",
  },
  stopGraceSeconds: {
    flag: "--stop-grace",
    env: "ROLLOUT_STOP_GRACE_SECONDS",
    schema: seconds(0, 3600),
    arg: "SECONDS",
    default: 30,
    describe: "After SIGTERM, how long the trainer's process group may take to exit before it gets SIGKILL.",
  },
  rolloutCommand: {
    flag: "--rollout-command",
    env: "ROLLOUT_ROLLOUT_COMMAND",
    schema: trainerCommand,
    arg: "CMD",
    describe:
      "The rollout workers a start_rollout command launches (the slime / AIEvoBox launcher), e.g. 'python3 launcher.py " +
      "--job-id {job_session} --rl-group-size {group_size}'. Placeholders: {job_session}, {group_size}, {restart_training}, " +
      "{engine}, {engine_url} (<server>/e/<engine>, where they post steps), {facade_url}. Split like trainerCommand. " +
      "In an `sh -c '...'` script (or any command with an option such as -c or -e that may run code) read " +
      "\"$ROLLOUT_JOB_SESSION\", not {job_session} (the exchange sends it: one a shell would read as syntax is refused " +
      "there). Unset: start_rollout commands are refused.",
  },
  rolloutCwd: {
    flag: "--rollout-cwd",
    env: "ROLLOUT_ROLLOUT_CWD",
    schema: z.string().min(1),
    arg: "DIR",
    describe: "Working directory of the rollout workers (default: the agent's).",
  },
  inferenceAdminUrl: {
    flag: "--inference-admin-url",
    env: "ROLLOUT_INFERENCE_ADMIN_URL",
    schema: httpUrl,
    arg: "URL",
    describe:
      "Base URL of the inference upstream (e.g. the slime LLM proxy, without /v1) that clear_sessions commands are sent to, " +
      "as POST <url>/admin/clear_sessions, when the engine drops a group. Default: inferenceUpstream without its /v1; " +
      "with neither set, such commands are acked as failed.",
  },
  facadeHost: {
    flag: "--facade-host",
    env: "ROLLOUT_FACADE_HOST",
    schema: z.string().min(1),
    arg: "HOST",
    default: "127.0.0.1",
    describe: "Address of the local trainer facade (AgentJet's swarm-server endpoints). Keep it on loopback.",
  },
  facadeAnyPeer: {
    flag: "--facade-any-peer",
    env: "ROLLOUT_FACADE_ANY_PEER",
    schema: z.union([z.boolean(), z.enum(["true", "false", "1", "0"]).transform((v) => v === "true" || v === "1")]),
    arg: "true|false",
    default: false,
    describe:
      "Serve the trainer facade to every process that reaches it, not only the agent's own user's: for a trainer in a container " +
      "or another network namespace (with --facade-host on an address it reaches). Anyone it serves can read the trainer's per-episode keys.",
  },
  facadePort: {
    flag: "--facade-port",
    env: "ROLLOUT_FACADE_PORT",
    schema: port,
    arg: "PORT",
    default: 10086,
    describe: "Port of the local trainer facade (AgentJet's default swarm-server port is 10086; 0 picks a free one).",
  },
  coalesceMs: {
    flag: "--coalesce-ms",
    env: "ROLLOUT_COALESCE_MS",
    schema: seconds(0, 1000),
    arg: "MS",
    default: 50,
    describe:
      "The facade gathers register_episode and is_episode_claimed calls (and identical status reads) that arrive " +
      "within this window into one request to the Worker. 0 forwards every call on its own.",
  },
  logDir: {
    flag: "--log-dir",
    env: "ROLLOUT_LOG_DIR",
    schema: z.string().min(1),
    arg: "DIR",
    default: "./rollout-agent/logs",
    describe: "Where the trainer's and the rollout workers' output goes (trainer.log, rollout-workers.log; rotated to trainer.log.1 ...).",
  },
  logMaxBytes: {
    flag: "--log-max-bytes",
    env: "ROLLOUT_LOG_MAX_BYTES",
    schema: positiveInt(2 ** 40),
    arg: "BYTES",
    default: 50 * 1024 * 1024,
    describe: "Rotate trainer.log, rollout-workers.log and a run's process logs once larger than this.",
  },
  logFiles: {
    flag: "--log-files",
    env: "ROLLOUT_LOG_FILES",
    schema: positiveInt(100),
    arg: "N",
    default: 5,
    describe: "How many rotated copies of each log to keep.",
  },
  stateDir: {
    flag: "--state-dir",
    env: "ROLLOUT_STATE_DIR",
    schema: z.string().min(1),
    arg: "DIR",
    default: "./rollout-agent/state",
    describe: "The agent's own files: the training YAML, the running trainer's pid, and finished-but-unacked commands (so a restart neither loses nor repeats them).",
  },
  deliveryTimeoutSeconds: {
    flag: "--delivery-timeout",
    env: "ROLLOUT_DELIVERY_TIMEOUT_SECONDS",
    schema: seconds(0.05, 3600),
    arg: "SECONDS",
    default: 10,
    describe: "How long one attempt waits for a runner's `ack` before the next attempt sends again.",
  },
  deliveryAttempts: {
    flag: "--delivery-attempts",
    env: "ROLLOUT_DELIVERY_ATTEMPTS",
    schema: positiveInt(100),
    arg: "N",
    default: 3,
    describe:
      "Times the message is sent (again when the last one's wait ran out) before a runner is reported gone and the result " +
      "undeliverable. An ack to any of them counts, however late, until the last one's wait runs out.",
  },
  deliveryConcurrency: {
    flag: "--delivery-concurrency",
    env: "ROLLOUT_DELIVERY_CONCURRENCY",
    schema: positiveInt(10_000),
    arg: "N",
    default: 512,
    describe:
      `Most deliveries in flight at once (always at most one per episode). The agent stops polling for commands while it ` +
      `holds ${BACKLOG_PER_DELIVERY_SLOT} times this many unfinished (queued or running), and asks for no more than fit.`,
  },
  deliveryQueueBytes: {
    flag: "--delivery-queue-bytes",
    env: "ROLLOUT_DELIVERY_QUEUE_BYTES",
    schema: positiveInt(2 ** 40),
    arg: "BYTES",
    default: DEFAULT_DELIVERY_QUEUE_BYTES,
    describe:
      "Bytes of result payloads (UTF-8) the agent holds for delivery, queued or being sent, at most: it stops polling for commands " +
      "at this many, and asks for no more than fit at 1.9 MB each (the largest a command can be), but at least one: it may " +
      "go over by one payload, and a payload larger than this is still delivered (nothing more is polled while it is held).",
  },
  pollWaitSeconds: {
    flag: "--poll-wait",
    env: "ROLLOUT_POLL_WAIT_SECONDS",
    schema: seconds(0, 25),
    arg: "SECONDS",
    default: 25,
    describe: "How long each command long-poll may be held open by the Worker.",
  },
  heartbeatSeconds: {
    flag: "--heartbeat",
    env: "ROLLOUT_HEARTBEAT_SECONDS",
    schema: seconds(0.05, 300),
    arg: "SECONDS",
    default: 10,
    describe: "How often the agent tells the engine it is alive (the engine shows it disconnected after 45 s of silence).",
  },
  requestTimeoutSeconds: {
    flag: "--request-timeout",
    env: "ROLLOUT_REQUEST_TIMEOUT_SECONDS",
    schema: seconds(0.1, 600),
    arg: "SECONDS",
    default: 30,
    describe: "How long to wait for any answer from the Worker (a long poll gets its wait on top) before counting it as unreachable.",
  },
  retryMaxSeconds: {
    flag: "--retry-max",
    env: "ROLLOUT_RETRY_MAX_SECONDS",
    schema: seconds(0.01, 600),
    arg: "SECONDS",
    default: 30,
    describe: "Longest wait between retries while the Worker is unreachable (backoff starts at 1/60 of it).",
  },
  gatewayHost: {
    flag: "--gateway-host",
    env: "ROLLOUT_GATEWAY_HOST",
    schema: z.string().min(1),
    arg: "HOST",
    default: "127.0.0.1",
    describe: "Address of the inference gateway the Worker relays claimed episodes' LLM calls to. Keep it on loopback and expose it through a tunnel (see gatewayUrl).",
  },
  gatewayPort: {
    flag: "--gateway-port",
    env: "ROLLOUT_GATEWAY_PORT",
    schema: port,
    arg: "PORT",
    default: 10087,
    describe: "Port of the inference gateway (0 picks a free one).",
  },
  gatewayUrl: {
    flag: "--gateway-url",
    env: "ROLLOUT_GATEWAY_URL",
    schema: httpUrl,
    arg: "URL",
    describe:
      "Where the Worker reaches the gateway, reported in every heartbeat, e.g. the https://....trycloudflare.com URL of " +
      "`cloudflared tunnel --url http://127.0.0.1:10087`. Default: the gateway's local address (enough when the Worker runs on this host).",
  },
  inferenceUpstream: {
    flag: "--inference-upstream",
    env: "ROLLOUT_INFERENCE_UPSTREAM",
    schema: httpUrl,
    arg: "URL",
    describe:
      "OpenAI-compatible base URL (ending in /v1) of a trainer that serves plain HTTP (vLLM, SGLang, a slime LLM proxy). " +
      "Default: the openai_base_url each episode registered. Ignored for AgentJet keys (sk-ajet-...), which go over ZeroMQ.",
  },
  upstreamSessionPath: {
    flag: "--upstream-session-path",
    env: "ROLLOUT_UPSTREAM_SESSION_PATH",
    schema: z.union([z.boolean(), z.enum(["true", "false", "1", "0"]).transform((v) => v === "true" || v === "1")]),
    arg: "true|false",
    default: false,
    describe: "Also put the episode id in the upstream's path (/v1/<episode>/chat/completions), for proxies that route sessions by path; the x-episode-uuid header is always sent.",
  },
  gatewayModels: {
    flag: "--gateway-models",
    env: "ROLLOUT_GATEWAY_MODELS",
    schema: z.union([
      z.array(z.string().min(1)).min(1),
      z
        .string()
        .transform((v) => v.split(",").map((m) => m.trim()).filter((m) => m !== ""))
        .refine((names) => names.length > 0, "must name at least one model"),
    ]),
    arg: "NAMES",
    default: ["agentjet"],
    describe: "Comma-separated model names /v1/models answers for AgentJet trainers (which serve whatever they train, under any name).",
  },
  zmqReceiveTimeoutSeconds: {
    flag: "--zmq-receive-timeout",
    env: "ROLLOUT_ZMQ_RECEIVE_TIMEOUT_SECONDS",
    schema: seconds(0.05, 3600),
    arg: "SECONDS",
    default: 60,
    describe:
      "How long the gateway waits for an AgentJet runner's answer before it resends the call on a fresh ZeroMQ socket (AgentJet's own server waits 60 s); " +
      "the relay's deadline bounds the whole call.",
  },
  tokenDialect: {
    flag: "--token-dialect",
    env: "ROLLOUT_TOKEN_DIALECT",
    schema: TokenDialect,
    arg: "vllm|sglang",
    default: "vllm",
    describe:
      "How the gateway asks an HTTP inference upstream for token ids and logprobs when the engine captures tokens: vllm " +
      "(return_token_ids, logprobs) or sglang (0.5.13 on: return_prompt_token_ids, return_meta_info, logprobs; streamed calls are asked whole).",
  },
  ledgerHistoryBytes: {
    flag: "--ledger-history-bytes",
    env: "ROLLOUT_LEDGER_HISTORY_BYTES",
    schema: positiveInt(2 ** 40),
    arg: "BYTES",
    default: DEFAULT_HISTORY_BYTES,
    describe:
      "Memory for each live claim's last recorded call (a digest of each of its messages and its answer, its token ids and " +
      "/v1/completions prompt), which the claim's next call is recorded as a delta of; least recently used claims go first, " +
      "and their next call is recorded whole.",
  },
  ledgerQueueBytes: {
    flag: "--ledger-queue-bytes",
    env: "ROLLOUT_LEDGER_QUEUE_BYTES",
    schema: positiveInt(2 ** 40),
    arg: "BYTES",
    default: DEFAULT_QUEUE_BYTES,
    describe: "Recorded calls waiting to be sent to the exchange, at most; when the exchange falls behind, the oldest are dropped (with a warning).",
  },
  agentId: {
    flag: "--agent-id",
    env: "ROLLOUT_AGENT_ID",
    schema: z.string().min(1).max(128),
    arg: "ID",
    describe: "Name shown on the engine's dashboard (default: <hostname>/<engine>).",
  },
} satisfies Record<string, OptionSpec>;

export type OptionKey = keyof typeof OPTIONS;
export const OPTION_KEYS = Object.keys(OPTIONS) as OptionKey[];
