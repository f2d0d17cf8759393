/**
 * Resolves the agent's configuration from, in rising precedence: defaults, a JSON config file,
 * environment variables and command-line flags. Every problem is collected and reported at
 * once, each naming where the bad value came from, so a bad config costs one round trip.
 */
import { hostname } from "node:os";
import { dirname, isAbsolute, resolve } from "node:path";
import { OPTIONS, OPTION_KEYS, type OptionKey } from "./options";
import { TemplateError, checkPlaceholders, splitCommand } from "./command-template";
import { parseRolloutCommand } from "./rollout/template";
import type { TokenDialect } from "../../src/protocol/ledger";

export type AgentConfig = {
  server: string;
  engine: string;
  token: string;
  /** The trainer command's words, placeholders not yet filled; null when none is configured. */
  trainerCommand: string[] | null;
  trainerCwd: string | null;
  /** The rollout workers' command words (src/rollout); optional so older callers need not set it. */
  rolloutCommand?: string[] | null;
  rolloutCwd?: string | null;
  inferenceAdminUrl?: string | null;
  stopGraceSeconds: number;
  facadeHost: string;
  /** Serve the facade to every peer (a containerized trainer), not only the agent's user's; optional so older callers need not set it. */
  facadeAnyPeer?: boolean;
  facadePort: number;
  coalesceMs: number;
  logDir: string;
  logMaxBytes: number;
  logFiles: number;
  stateDir: string;
  deliveryTimeoutSeconds: number;
  deliveryAttempts: number;
  deliveryConcurrency: number;
  /** Bytes of delivery payloads held before polling pauses; optional so older callers need not set it. */
  deliveryQueueBytes?: number;
  pollWaitSeconds: number;
  heartbeatSeconds: number;
  requestTimeoutSeconds: number;
  retryMaxSeconds: number;
  agentId: string;
  gatewayHost: string;
  gatewayPort: number;
  /** Public URL of the gateway; null: its local address. */
  gatewayUrl: string | null;
  inferenceUpstream: string | null;
  upstreamSessionPath: boolean;
  gatewayModels: string[];
  zmqReceiveTimeoutSeconds: number;
  /** The trajectory ledger (gateway recording); optional so older callers need not set them. */
  tokenDialect?: TokenDialect;
  ledgerHistoryBytes?: number;
  ledgerQueueBytes?: number;
};

export type CliRequest =
  | { kind: "run"; config: AgentConfig }
  | { kind: "print-config"; config: AgentConfig }
  | { kind: "help" }
  | { kind: "version" };

export type ConfigResult = { ok: true; request: CliRequest } | { ok: false; errors: string[] };

export type ConfigSources = {
  argv: readonly string[];
  env: Readonly<Record<string, string | undefined>>;
  cwd: string;
  /** Reads the config file; throws like fs.readFileSync. */
  readFile: (path: string) => string;
};

export const CONFIG_ENV = "ROLLOUT_AGENT_CONFIG";

type Raw = { value: unknown; source: string; baseDir: string };

const FLAG_TO_KEY = new Map<string, OptionKey>(OPTION_KEYS.map((k) => [OPTIONS[k].flag, k]));
const PATH_KEYS: ReadonlySet<OptionKey> = new Set(["logDir", "stateDir", "trainerCwd", "rolloutCwd"]);

export function resolveConfig(src: ConfigSources): ConfigResult {
  const errors: string[] = [];
  const fromFlags = new Map<OptionKey, Raw>();
  let configPath: string | null = null;
  let mode: "run" | "print-config" = "run";

  // Flags: `--name value` or `--name=value`.
  for (let i = 0; i < src.argv.length; i++) {
    const arg = src.argv[i] as string;
    if (arg === "--help" || arg === "-h") return { ok: true, request: { kind: "help" } };
    if (arg === "--version") return { ok: true, request: { kind: "version" } };
    if (arg === "--print-config") {
      mode = "print-config";
      continue;
    }
    const eq = arg.indexOf("=");
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    const key = FLAG_TO_KEY.get(name);
    if (name !== "--config" && key === undefined) {
      errors.push(arg.startsWith("-") ? `unknown option ${name} (see --help)` : `unexpected argument ${JSON.stringify(arg)} (options start with --; see --help)`);
      continue;
    }
    let value: string;
    if (eq > 0) value = arg.slice(eq + 1);
    else if (i + 1 < src.argv.length && !(src.argv[i + 1] as string).startsWith("--")) value = src.argv[++i] as string;
    else {
      errors.push(`${name} needs a value`);
      continue;
    }
    if (name === "--config") configPath = resolve(src.cwd, value);
    else fromFlags.set(key as OptionKey, { value, source: name, baseDir: src.cwd });
  }

  // Environment.
  const fromEnv = new Map<OptionKey, Raw>();
  for (const key of OPTION_KEYS) {
    const v = src.env[OPTIONS[key].env];
    if (v !== undefined && v !== "") fromEnv.set(key, { value: v, source: OPTIONS[key].env, baseDir: src.cwd });
  }
  if (configPath === null && src.env[CONFIG_ENV]) configPath = resolve(src.cwd, src.env[CONFIG_ENV] as string);

  // Config file.
  const fromFile = new Map<OptionKey, Raw>();
  if (configPath !== null) {
    const file = readConfigFile(src, configPath);
    if (!file.ok) errors.push(file.error);
    else {
      for (const [k, v] of Object.entries(file.values)) {
        if (!(k in OPTIONS)) {
          errors.push(`${configPath}: unknown setting "${k}"${suggest(k)}`);
          continue;
        }
        fromFile.set(k as OptionKey, { value: v, source: `"${k}" in ${configPath}`, baseDir: dirname(configPath) });
      }
    }
  }

  const values: Partial<Record<OptionKey, unknown>> = {};
  for (const key of OPTION_KEYS) {
    const spec = OPTIONS[key];
    const raw = fromFlags.get(key) ?? fromEnv.get(key) ?? fromFile.get(key);
    if (raw === undefined) {
      if ("required" in spec && spec.required) {
        errors.push(`${key} is not set: pass ${spec.flag}, set ${spec.env}, or put "${key}" in the config file (--config FILE)`);
      } else if ("default" in spec) values[key] = spec.default;
      continue;
    }
    const parsed = spec.schema.safeParse(raw.value);
    if (!parsed.success) {
      const shown = "secret" in spec && spec.secret ? "" : ` (got ${JSON.stringify(raw.value)})`;
      errors.push(`${key} from ${raw.source}: ${parsed.error.issues.map((i) => i.message).join("; ")}${shown}`);
      continue;
    }
    const misplaced = key === "server" ? engineUrlRefusal(parsed.data as string) : null;
    if (misplaced !== null) {
      errors.push(`${key} from ${raw.source}: ${misplaced}`);
      continue;
    }
    values[key] = PATH_KEYS.has(key) ? resolvePath(raw.baseDir, parsed.data as string) : parsed.data;
  }

  let trainerCommand: string[] | null = null;
  if (values.trainerCommand !== undefined) {
    try {
      const v = values.trainerCommand as string | string[];
      trainerCommand = typeof v === "string" ? splitCommand(v) : [...v];
      checkPlaceholders(trainerCommand);
    } catch (e) {
      if (!(e instanceof TemplateError)) throw e;
      errors.push(`trainerCommand: ${e.message}`);
    }
  }
  let rolloutCommand: string[] | null = null;
  if (values.rolloutCommand !== undefined) {
    try {
      rolloutCommand = parseRolloutCommand(values.rolloutCommand as string | string[]);
    } catch (e) {
      if (!(e instanceof TemplateError)) throw e;
      errors.push(`rolloutCommand: ${e.message}`);
    }
  }
  if (errors.length > 0) return { ok: false, errors };

  const engine = values.engine as string;
  const config: AgentConfig = {
    server: values.server as string,
    engine,
    token: values.token as string,
    trainerCommand,
    trainerCwd: (values.trainerCwd as string | undefined) ?? null,
    rolloutCommand,
    rolloutCwd: (values.rolloutCwd as string | undefined) ?? null,
    inferenceAdminUrl: (values.inferenceAdminUrl as string | undefined) ?? null,
    stopGraceSeconds: values.stopGraceSeconds as number,
    facadeHost: values.facadeHost as string,
    facadeAnyPeer: values.facadeAnyPeer as boolean,
    facadePort: values.facadePort as number,
    coalesceMs: values.coalesceMs as number,
    logDir: resolvePath(src.cwd, values.logDir as string),
    logMaxBytes: values.logMaxBytes as number,
    logFiles: values.logFiles as number,
    stateDir: resolvePath(src.cwd, values.stateDir as string),
    deliveryTimeoutSeconds: values.deliveryTimeoutSeconds as number,
    deliveryAttempts: values.deliveryAttempts as number,
    deliveryConcurrency: values.deliveryConcurrency as number,
    deliveryQueueBytes: values.deliveryQueueBytes as number,
    pollWaitSeconds: values.pollWaitSeconds as number,
    heartbeatSeconds: values.heartbeatSeconds as number,
    requestTimeoutSeconds: values.requestTimeoutSeconds as number,
    retryMaxSeconds: values.retryMaxSeconds as number,
    agentId: (values.agentId as string | undefined) ?? `${hostname()}/${engine}`,
    gatewayHost: values.gatewayHost as string,
    gatewayPort: values.gatewayPort as number,
    gatewayUrl: (values.gatewayUrl as string | undefined) ?? null,
    inferenceUpstream: (values.inferenceUpstream as string | undefined) ?? null,
    upstreamSessionPath: values.upstreamSessionPath as boolean,
    gatewayModels: [...(values.gatewayModels as string[])],
    zmqReceiveTimeoutSeconds: values.zmqReceiveTimeoutSeconds as number,
    tokenDialect: values.tokenDialect as TokenDialect,
    ledgerHistoryBytes: values.ledgerHistoryBytes as number,
    ledgerQueueBytes: values.ledgerQueueBytes as number,
  };
  return { ok: true, request: { kind: mode, config } };
}

function readConfigFile(src: ConfigSources, path: string): { ok: true; values: Record<string, unknown> } | { ok: false; error: string } {
  let text: string;
  try {
    text = src.readFile(path);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return { ok: false, error: code === "ENOENT" ? `config file ${path} does not exist` : `cannot read config file ${path}: ${(e as Error).message}` };
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    return { ok: false, error: `config file ${path} is not valid JSON: ${(e as Error).message}` };
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    return { ok: false, error: `config file ${path} must hold one JSON object of settings, e.g. {"server": "https://...", "engine": "default"}` };
  }
  return { ok: true, values: json as Record<string, unknown> };
}

/**
 * Why a server URL is an engine's base URL (what `npm start` prints as one), or null. The agent
 * adds /e/<engine> itself, so it would call /e/<engine>/e/<engine>/..., which no exchange
 * serves. The URL is not echoed: a base URL may carry a token (/e/<engine>/t/<token>).
 */
function engineUrlRefusal(server: string): string | null {
  const url = new URL(server);
  if (!/(^|\/)e(\/|$)/.test(url.pathname)) return null;
  return `give the exchange's origin (e.g. ${url.origin}), not an engine's base URL (/e/<engine>): the engine is named with --engine`;
}

function resolvePath(base: string, p: string): string {
  return isAbsolute(p) ? p : resolve(base, p);
}

/** "unknown setting "facade_port" (did you mean "facadePort"?)" */
function suggest(key: string): string {
  const norm = (s: string): string => s.toLowerCase().replace(/[^a-z0-9]/g, "");
  const hit = OPTION_KEYS.find((k) => norm(k) === norm(key));
  return hit ? ` (did you mean "${hit}"?)` : `; known settings: ${OPTION_KEYS.join(", ")}`;
}

/** The resolved config as JSON with secrets masked, for --print-config and the startup log: the token, and a URL's password. */
export function redactedConfig(config: AgentConfig): Record<string, unknown> {
  const out: Record<string, unknown> = { ...config };
  for (const key of OPTION_KEYS) {
    const spec = OPTIONS[key];
    const value = out[key];
    if ("secret" in spec && spec.secret && value !== undefined) out[key] = "***";
    else if (typeof value === "string") out[key] = withoutPassword(value);
  }
  return out;
}

/** A URL with its password (a Basic-auth upstream's: the gateway sends it) shown as ***; any other text as it is. */
function withoutPassword(text: string): string {
  if (!text.includes("@") || !URL.canParse(text)) return text;
  const u = new URL(text);
  if (u.password === "") return text;
  u.password = "***";
  return u.toString();
}
