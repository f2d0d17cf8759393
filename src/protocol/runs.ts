/**
 * Training runs (issue 5): the environment catalog the GPU host's agent reports, the run
 * configuration (locked infrastructure fields plus an operator's or an LLM agent's edits),
 * runs and their processes, and inference tests. The REST routes, the MCP tools, the typed
 * client and the local-agent all validate with these schemas.
 */
import { z } from "zod";
import { MAX_LOG_TAIL_BYTES, textOfAtMost } from "./limits";
import { openEnum } from "./open-enum";

/** Any JSON value: config values are whatever the environment's config class accepts. */
export const JsonValue = z.json();
export type JsonValue = z.infer<typeof JsonValue>;

const Name = z.string().min(1).max(200);
/** A config field or environment name as Python spells identifiers (and Atropos' dotted CLI names do not). */
const FieldName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, "field names are Python identifiers (letters, digits and _, not starting with a digit)");

// ------------------------------------------------------------------ environments

export const ConfigField = z.object({
  name: FieldName,
  /** The annotation as Python spells it, e.g. `int`, `Optional[str]`, `List[int]`, `Literal['a', 'b']`. */
  type: z.string().max(500),
  default: JsonValue.nullable().default(null),
  description: z.string().max(4000).default(""),
});
export type ConfigField = z.infer<typeof ConfigField>;

const FIELDS_SOURCES = ["import", "ast"] as const;

export const EnvironmentInfo = z.object({
  name: Name,
  class_name: Name,
  file_path: z.string().min(1).max(4096),
  /** The first line of the class docstring. */
  description: z.string().max(2000).default(""),
  config_class: z.string().max(200).default("BaseEnvConfig"),
  /** The config class's fields; null when the agent could not read them (see fields_error). */
  fields: z.array(ConfigField).max(500).nullable().default(null),
  /** How the fields were read: by importing the module (complete), or from its source (only fields declared in that file). */
  fields_source: z.enum(FIELDS_SOURCES).nullable().default(null),
  fields_error: z.string().max(4000).nullable().default(null),
});
export type EnvironmentInfo = z.infer<typeof EnvironmentInfo>;
/** An environment as answers give it: a newer exchange may read fields another way. */
const EnvironmentInfoView = EnvironmentInfo.extend({ fields_source: openEnum(FIELDS_SOURCES).nullable().default(null) });

/** A file that could not be scanned: reported, not fatal. */
export const ScanProblem = z.object({ file_path: z.string().max(4096), error: z.string().max(4000) });
export type ScanProblem = z.infer<typeof ScanProblem>;

export const CatalogReport = z.object({
  agent_id: z.string().max(128).default(""),
  directories: z.array(z.string().max(4096)).max(64).default([]),
  environments: z.array(EnvironmentInfo).max(500),
  problems: z.array(ScanProblem).max(500).default([]),
});
export type CatalogReport = z.infer<typeof CatalogReport>;

export const CATALOG_STATES = ["ready", "no_agent", "no_runs_config", "scan_pending", "scan_failed", "not_scanned"] as const;
/**
 * Why the catalog is what it is: `ready` (the last scan's report), or what stands in the way:
 * no agent connected, an agent without a runs config, a scan queued or under way, a scan that
 * failed, or an agent that has not reported a scan. `detail` says it in words, with what to do.
 */
export const CatalogStatus = z.object({ state: openEnum(CATALOG_STATES), detail: z.string() });
export type CatalogStatus = z.infer<typeof CatalogStatus>;

export const CatalogResponse = z.object({
  environments: z.array(EnvironmentInfoView),
  count: z.number().int(),
  problems: z.array(ScanProblem),
  directories: z.array(z.string()),
  /** Unix seconds of the agent's last scan report; null before the first. */
  scanned_at: z.number().nullable(),
  selected: z.string().nullable(),
  catalog_status: CatalogStatus,
});
export type CatalogResponse = z.infer<typeof CatalogResponse>;

export const ScanResponse = z.object({ queued: z.literal(true), command_seq: z.number().int(), message: z.string() });

// ------------------------------------------------------------------ configuration

export const SECTIONS = ["env", "openai", "trainer"] as const;
/** The sections of a run's YAML: the environment's config, its inference servers, the trainer's own settings. */
export const Section = z.enum(SECTIONS);
export type Section = z.infer<typeof Section>;

export const LockedField = z.object({ section: Section, name: FieldName, value: JsonValue });
export type LockedField = z.infer<typeof LockedField>;

export const SetLockedFieldsRequest = z
  .object({
    set: z.array(LockedField).max(200).default([]),
    remove: z.array(z.object({ section: Section, name: FieldName })).max(200).default([]),
  })
  .refine((r) => r.set.length + r.remove.length > 0, "give at least one field to set or remove");
export type SetLockedFieldsRequest = z.infer<typeof SetLockedFieldsRequest>;

export const LockedFieldsResponse = z.object({ locked_fields: z.array(LockedField) });

export const SelectEnvironmentRequest = z.object({
  name: Name,
  /** Forget earlier edits of this environment and start from its defaults. */
  reset_edits: z.boolean().default(false),
});
export type SelectEnvironmentRequest = z.infer<typeof SelectEnvironmentRequest>;

export const EditConfigRequest = z.object({ field: FieldName, value: JsonValue });
export type EditConfigRequest = z.infer<typeof EditConfigRequest>;

export const ConfigurableFieldView = z.object({
  name: z.string(),
  type: z.string(),
  default: JsonValue.nullable(),
  description: z.string(),
  current_value: JsonValue.nullable(),
  edited: z.boolean(),
});
export const LockedFieldView = z.object({
  /** Read as an open enum: a newer exchange's YAML may have more sections. */
  section: openEnum(SECTIONS),
  name: z.string(),
  locked_value: JsonValue,
  /** For env fields the environment declares: its type, default and description. */
  type: z.string().nullable(),
  default: JsonValue.nullable(),
  description: z.string(),
});

export const CurrentConfigResponse = z.object({
  environment: z.string().nullable(),
  /** False when the selected environment is no longer in the catalog (a rescan dropped it). */
  environment_available: z.boolean(),
  file_path: z.string().nullable(),
  fields_source: openEnum(FIELDS_SOURCES).nullable(),
  fields_error: z.string().nullable(),
  configurable_fields: z.array(ConfigurableFieldView),
  locked_fields: z.array(LockedFieldView),
  edits: z.record(z.string(), JsonValue),
  /** The YAML a run started now would get; null without a selected environment. */
  yaml: z.string().nullable(),
});
export type CurrentConfigResponse = z.infer<typeof CurrentConfigResponse>;

export const SelectEnvironmentResponse = CurrentConfigResponse.extend({ message: z.string() });
export const EditConfigResponse = z.object({
  message: z.string(),
  field: z.string(),
  value: JsonValue,
  edits: z.record(z.string(), JsonValue),
});

// ------------------------------------------------------------------ runs

export const RUN_STATUSES = ["pending", "starting", "running", "stopping", "stopped", "completed", "failed"] as const;
export const RunStatus = z.enum(RUN_STATUSES);
export type RunStatus = z.infer<typeof RunStatus>;
/** A run's status as answers give it: the agent and pinned SDKs read those of an exchange that may know more. */
const RunStatusView = openEnum(RUN_STATUSES);
/** A run in one of these holds the engine: no second run may start. */
export const ACTIVE_RUN_STATUSES = ["pending", "starting", "running", "stopping"] as const satisfies readonly RunStatus[];

export const PROCESS_STATES = ["pending", "starting", "ready", "exited", "stopped", "failed"] as const;
export const ProcessState = z.enum(PROCESS_STATES);
export type ProcessState = z.infer<typeof ProcessState>;

export const RunId = z.string().regex(/^run_[a-z0-9]{4,40}$/, "run ids look like run_k3x9...");

/**
 * Unix seconds, from 1970 to the end of year 9999: the exchange keeps milliseconds, and a time
 * past that (1e308) is Infinity there, which D1 stores as null.
 */
const processTime = z.number().min(0).max(253_402_300_799).nullable().default(null);

/**
 * One process of a run, as the agent reports it, one D1 row each: besides its 16,384-byte log
 * tail, at most 16,384 UTF-16 units (49,152 bytes of UTF-8), far under what a row holds.
 */
export const ProcessReport = z.object({
  name: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, "process names are 1-64 characters of letters, digits, _ . -"),
  /** Start order, from 0; processes stop in reverse order. */
  order: z.number().int().min(0).max(63),
  state: ProcessState,
  pid: z.number().int().positive().nullable().default(null),
  command: z.string().max(8192).default(""),
  log_path: z.string().max(4096).default(""),
  log_tail: textOfAtMost(MAX_LOG_TAIL_BYTES).default(""),
  exit_code: z.number().int().nullable().default(null),
  signal: z.string().max(32).nullable().default(null),
  started_at: processTime,
  ready_at: processTime,
  ended_at: processTime,
  detail: z.string().max(4000).default(""),
});
export type ProcessReport = z.infer<typeof ProcessReport>;

/** One line of a run's metrics file (JSON lines the run's processes append). */
export const MetricsPoint = z.object({
  /** The line's index in the metrics file: a report sent twice stores each point once. */
  index: z.number().int().min(0),
  step: z.number().int().nullable().default(null),
  at: z.number(),
  values: z.record(z.string(), JsonValue),
});
export type MetricsPoint = z.infer<typeof MetricsPoint>;

export const AGENT_RUN_STATUSES = ["starting", "running", "stopped", "completed", "failed"] as const;

export const RunReport = z.object({
  status: z.enum(AGENT_RUN_STATUSES),
  /** Plain words for the operator: why the run failed, what was stopped. */
  detail: textOfAtMost(16_384).default(""),
  processes: z.array(ProcessReport).max(64).default([]),
  metrics: z.array(MetricsPoint).max(500).default([]),
  agent_id: z.string().max(128).default(""),
});
export type RunReport = z.infer<typeof RunReport>;

export const RunReportResponse = z.object({
  run_id: z.string(),
  status: RunStatusView,
  /** The run is over on the engine's side (stopped, or forced): the agent must stop whatever it still runs of it. */
  must_stop: z.boolean(),
});
export type RunReportResponse = z.infer<typeof RunReportResponse>;

export const ProcessView = ProcessReport.omit({ log_tail: true }).extend({ state: openEnum(PROCESS_STATES), log_tail: z.string() });

export const RunView = z.object({
  run_id: z.string(),
  environment: z.string(),
  status: RunStatusView,
  detail: z.string(),
  /** Unix seconds. */
  created_at: z.number(),
  started_at: z.number().nullable(),
  ended_at: z.number().nullable(),
  running_time_seconds: z.number().nullable(),
  stop_requested: z.boolean(),
  command_seq: z.number().int().nullable(),
});
export type RunView = z.infer<typeof RunView>;

export const RunStatusResponse = RunView.extend({
  processes: z.array(ProcessView),
  /** The latest metrics point, if the run wrote any. */
  metrics: MetricsPoint.nullable(),
  edits: z.record(z.string(), JsonValue),
});
export type RunStatusResponse = z.infer<typeof RunStatusResponse>;

export const RunEvent = z.object({ at: z.number(), kind: z.string(), detail: z.string() });

export const RunResultsResponse = RunStatusResponse.extend({
  config_yaml: z.string(),
  metrics_history: z.array(MetricsPoint),
  events: z.array(RunEvent),
});
export type RunResultsResponse = z.infer<typeof RunResultsResponse>;

export const ListRunsQuery = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(20),
  /** Runs created before this run (for paging, newest first). */
  before: RunId.optional(),
});
export type ListRunsQuery = z.infer<typeof ListRunsQuery>;

/** The same over MCP, whose arguments are JSON: a limit is a number there, not text to read as one ("5", true, [7]). */
export const ListRunsArgs = ListRunsQuery.extend({ limit: z.number().int().min(1).max(100).default(20) });

export const ListRunsResponse = z.object({ runs: z.array(RunView), count: z.number().int(), active_run_id: z.string().nullable() });

/** Starts a run of the selected environment with the current edits; `environment`, when given, must be the selected one. */
export const StartRunRequest = z.object({ environment: Name.optional() });
export type StartRunRequest = z.infer<typeof StartRunRequest>;

export const StartRunResponse = RunStatusResponse.extend({
  config_yaml: z.string(),
  message: z.string(),
  /** Edits a locked field overrides: kept, but the locked value is what the run gets. */
  overridden_edits: z.array(z.string()),
});
export type StartRunResponse = z.infer<typeof StartRunResponse>;

export const StopRunResponse = RunView.extend({ message: z.string() });
export type StopRunResponse = z.infer<typeof StopRunResponse>;

export const StopRunRequest = z.object({
  reason: z.string().max(1000).default(""),
  /** Mark the run stopped now, without waiting for the agent (e.g. its host is gone); the agent stops what is left when it reports. */
  force: z.boolean().default(false),
});
export type StopRunRequest = z.infer<typeof StopRunRequest>;

export const AgentActiveRunsResponse = z.object({
  runs: z.array(RunView.extend({ processes: z.array(ProcessView), environment_file: z.string(), config_yaml: z.string() })),
});
export type AgentActiveRunsResponse = z.infer<typeof AgentActiveRunsResponse>;

// ------------------------------------------------------------------ inference tests

/**
 * The agent's own settings' variables (ROLLOUT_TRAINER_TOKEN among them). An inference test sends
 * the key it names to a base URL the caller picks, so naming one would hand an operator token the
 * trainer token: refused here and again by the agent.
 */
export const AGENT_ENV_PREFIX = "ROLLOUT_";

export const InferenceModel = z.object({
  model: z.string().min(1).max(200),
  base_url: z.url({ protocol: /^https?$/ }).max(2048),
  /** The name of an environment variable on the GPU host that holds the API key: keys never pass through the exchange. */
  api_key_env: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, "api_key_env is an environment variable name")
    .refine((name) => !name.startsWith(AGENT_ENV_PREFIX), `api_key_env may not name a ${AGENT_ENV_PREFIX}* variable: those are the GPU-host agent's own settings, its trainer token among them`)
    .nullable()
    .default(null),
});
export type InferenceModel = z.infer<typeof InferenceModel>;

/**
 * Where the seed (hermes-agent's rl_training_tool) ran its inference tests: OpenRouter, with the
 * key in OPENROUTER_API_KEY. A model named by its id alone is called there, as in the seed.
 */
const OPENROUTER = { base_url: "https://openrouter.ai/api/v1", api_key_env: "OPENROUTER_API_KEY" } as const;
/** The seed's test models, small, medium and large, tested when a request names none. */
const SEED_TEST_MODELS: readonly string[] = ["qwen/qwen3-8b", "zhipu-ai/glm-4-flash", "minimax/minimax-m1"];

const ModelById = z
  .string()
  .min(1)
  .max(200)
  .transform((model): InferenceModel => ({ model, ...OPENROUTER }));

/**
 * An inference test's settings as kept: JSON in the test's D1 row and sent in its command. 8
 * models of at most 2,376 UTF-16 units, at most 114,048 bytes escaped, far under what a row holds.
 */
export const InferenceTestRequest = z.object({
  num_steps: z.number().int().min(1).max(50).default(3),
  group_size: z.number().int().min(1).max(64).default(16),
  models: z.array(InferenceModel).min(1).max(8),
  /** Deadline per model, in seconds. */
  timeout_seconds: z.number().int().min(5).max(3600).default(600),
});

/** A request to start one: a model may be named by its id alone (on OpenRouter), and none names the seed's three. */
export const StartInferenceTestRequest = InferenceTestRequest.extend({
  models: z
    .array(z.union([InferenceModel, ModelById]))
    .min(1)
    .max(8)
    .default(() => SEED_TEST_MODELS.map((model) => ({ model, ...OPENROUTER })))
    .describe(`Each {model, base_url, api_key_env}, or a model id alone, called on OpenRouter with the key in OPENROUTER_API_KEY; none: the seed's ${SEED_TEST_MODELS.join(", ")}.`),
});
export type StartInferenceTestRequest = z.infer<typeof StartInferenceTestRequest>;

export const ModelResult = z.object({
  model: z.string(),
  base_url: z.string(),
  steps_tested: z.number().int(),
  total_completions: z.number().int(),
  correct_completions: z.number().int(),
  accuracy: z.number(),
  steps_with_correct: z.number().int(),
  step_success_rate: z.number(),
  steps: z.array(z.object({ step: z.number().int(), completions: z.number().int(), correct: z.number().int(), scores: z.array(z.number()) })).max(100),
  error: z.string().nullable(),
  log_tail: z.string().default(""),
  seconds: z.number(),
});
export type ModelResult = z.infer<typeof ModelResult>;

export const INFERENCE_TEST_STATUSES = ["pending", "running", "done", "failed"] as const;

export const InferenceTestReport = z.object({
  status: z.enum(["running", "done", "failed"]),
  detail: z.string().max(4000).default(""),
  models: z.array(ModelResult).max(8).default([]),
});
export type InferenceTestReport = z.infer<typeof InferenceTestReport>;

export const InferenceTestView = z.object({
  test_id: z.string(),
  environment: z.string(),
  status: openEnum(INFERENCE_TEST_STATUSES),
  detail: z.string(),
  request: InferenceTestRequest,
  models: z.array(ModelResult),
  summary: z
    .object({
      models_tested: z.number().int(),
      models_succeeded: z.number().int(),
      best_model: z.string().nullable(),
      avg_accuracy: z.number(),
      environment_working: z.boolean(),
    })
    .nullable(),
  created_at: z.number(),
  finished_at: z.number().nullable(),
});
export type InferenceTestView = z.infer<typeof InferenceTestView>;

export const StartInferenceTestResponse = InferenceTestView.extend({ message: z.string() });

export const TestId = z.string().regex(/^itest_[a-z0-9]{4,40}$/, "inference test ids look like itest_k3x9...");
