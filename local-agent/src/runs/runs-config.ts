/**
 * The GPU host's side of training runs, from a JSON file named by ROLLOUT_RUNS_CONFIG (or the
 * agent's runsConfig): where the environments are, and which processes make a run. The host
 * decides what runs on it; the exchange only names an environment and sends the config YAML,
 * so an operator token cannot make the agent run arbitrary commands.
 *
 *   {
 *     "environmentDirs": ["/opt/tinker-atropos/tinker_atropos/environments"],
 *     "workDir": "/opt/tinker-atropos",
 *     "processes": [
 *       {"name": "trainer", "command": "python launch_training.py --config {config}",
 *        "ready": {"http": "http://127.0.0.1:8001/health"}, "readyTimeoutSeconds": 600},
 *       {"name": "env", "command": "{python} {env_file} serve --config {config}"}
 *     ]
 *   }
 *
 * Placeholders in commands: {config} (the run's YAML file), {env_file}, {env_name},
 * {env_class}, {run_id}, {python}, {work_dir}, {run_dir}, {metrics_file}. The engine's Atropos
 * API with the agent's token (the rollout server, instead of a run-api process) is in the
 * run's YAML and in ROLLOUT_ATROPOS_URL, never in a command: every user of the host reads
 * every process's command line (ps).
 */
import { isAbsolute, resolve } from "node:path";
import { z } from "zod";
import { TemplateError, expandCommand, splitCommand } from "../command-template";

export const RUN_PLACEHOLDERS = ["config", "env_file", "env_name", "env_class", "run_id", "python", "work_dir", "run_dir", "metrics_file"] as const;

/**
 * Filled by older agents with the Atropos URL and its token: refused by name, so a host's config
 * that used it says what to do instead rather than "unknown placeholder".
 */
const TOKEN_PLACEHOLDER = "{atropos_url}";

const Ready = z.union([
  z.object({ port: z.number().int().min(1).max(65535), host: z.string().default("127.0.0.1") }).strict(),
  z.object({ http: z.url({ protocol: /^https?$/ }) }).strict(),
]);
export type Ready = z.infer<typeof Ready>;

const Command = z.union([z.string().min(1), z.array(z.string()).min(1)]);

const ProcessSpec = z
  .object({
    name: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, "process names are 1-64 characters of letters, digits, _ . -"),
    command: Command,
    cwd: z.string().optional(),
    env: z.record(z.string(), z.string()).default({}),
    /** How to know it is ready; without it the process counts as ready once it runs. */
    ready: Ready.optional(),
    readyTimeoutSeconds: z.number().positive().max(86_400).default(120),
  })
  .strict();

export const RunsConfigFile = z
  .object({
    environmentDirs: z.array(z.string()).default([]),
    python: z.string().default("python3"),
    workDir: z.string().optional(),
    /** Where each run's directory (config, logs, metrics) goes; default <agent state dir>/runs. */
    runsDir: z.string().optional(),
    processes: z.array(ProcessSpec).max(16).default([]),
    stopGraceSeconds: z.number().positive().max(3600).default(10),
    scanTimeoutSeconds: z.number().positive().max(3600).default(60),
    importTimeoutSeconds: z.number().positive().max(3600).default(30),
    /** Seconds between checks of a run's processes and metrics file. */
    pollSeconds: z.number().positive().max(60).default(1),
  })
  .strict();

export type ProcessSpec = Omit<z.infer<typeof ProcessSpec>, "command" | "cwd"> & { argv: string[]; cwd: string | null };
export type RunsConfig = Omit<z.infer<typeof RunsConfigFile>, "processes" | "workDir" | "runsDir"> & {
  processes: ProcessSpec[];
  workDir: string | null;
  runsDir: string;
};

export type RunsConfigResult = { ok: true; config: RunsConfig } | { ok: false; errors: string[] };

/** Validates a runs config; relative paths are taken from `baseDir` (the file's directory). */
export function parseRunsConfig(raw: unknown, baseDir: string, stateDir: string): RunsConfigResult {
  const parsed = RunsConfigFile.safeParse(raw);
  if (!parsed.success) return { ok: false, errors: parsed.error.issues.map((i) => `${i.path.join(".") || "runs config"}: ${i.message}`) };
  const c = parsed.data;
  const abs = (p: string): string => (isAbsolute(p) ? p : resolve(baseDir, p));
  const errors: string[] = [];
  const names = new Set<string>();
  const processes = c.processes.map((p, i): ProcessSpec => {
    if (names.has(p.name)) errors.push(`processes.${i}.name: '${p.name}' is used twice`);
    names.add(p.name);
    let argv: string[] = [];
    try {
      argv = typeof p.command === "string" ? splitCommand(p.command) : p.command;
      if (argv.some((w) => w.includes(TOKEN_PLACEHOLDER))) {
        throw new TemplateError(
          `${TOKEN_PLACEHOLDER} is refused: it would put the agent's trainer token in the command line, which every user of the host can read (ps); the process finds the URL in ROLLOUT_ATROPOS_URL and in its {config} file (rollout_server_url)`,
        );
      }
      expandCommand(argv, Object.fromEntries(RUN_PLACEHOLDERS.map((k) => [k, ""])));
    } catch (e) {
      if (!(e instanceof TemplateError)) throw e;
      errors.push(`processes.${i}.command: ${e.message}`);
    }
    return { name: p.name, argv, cwd: p.cwd === undefined ? null : abs(p.cwd), env: p.env, ...(p.ready ? { ready: p.ready } : {}), readyTimeoutSeconds: p.readyTimeoutSeconds };
  });
  if (errors.length > 0) return { ok: false, errors };
  return {
    ok: true,
    config: {
      ...c,
      environmentDirs: c.environmentDirs.map(abs),
      workDir: c.workDir === undefined ? null : abs(c.workDir),
      runsDir: c.runsDir === undefined ? resolve(stateDir, "runs") : abs(c.runsDir),
      processes,
    },
  };
}
