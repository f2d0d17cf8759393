/**
 * The MCP tools for LLM agents: the same operations as the REST routes, with the same zod
 * input schemas (each tool's JSON Schema is generated from them) and the same refusals, plus
 * a `next_steps` hint on success so an agent knows what to call next.
 */
import { z } from "zod";
import type { EngineOp } from "../../auth/roles";
import { EditConfigRequest, ListRunsArgs, type CatalogResponse, type CurrentConfigResponse, RunId, SelectEnvironmentRequest, StartInferenceTestRequest, StartRunRequest, StopRunRequest, TestId } from "../../protocol/runs";
import * as config from "../config-ops";
import type { RunsCtx } from "../context";
import * as inference from "../inference-ops";
import type { RunsReply } from "../reply";
import * as runs from "../run-ops";
import { UpdateLedgerConfigRequest } from "../../protocol/ledger";

export type Tool = {
  name: string;
  title: string;
  description: string;
  op: EngineOp;
  input: z.ZodObject;
  call: (ctx: RunsCtx, args: unknown) => Promise<RunsReply<unknown>>;
  /** What to call next, given the tool's answer. */
  nextSteps: (body: unknown) => string[];
};

function tool<S extends z.ZodObject, B>(
  name: string,
  title: string,
  op: EngineOp,
  input: S,
  description: string,
  nextSteps: string[] | ((body: B) => string[]),
  call: (ctx: RunsCtx, args: z.output<S>) => Promise<RunsReply<B>>,
): Tool {
  const next = typeof nextSteps === "function" ? (body: unknown) => nextSteps(body as B) : () => nextSteps;
  return { name, title, op, input, description, nextSteps: next, call: (ctx, args) => call(ctx, args as z.output<S>) };
}

/** Selecting needs environments listed; whatever the catalog's status says stands in the way comes with it (or alone). */
function catalogNextSteps(cat: CatalogResponse): string[] {
  const select = cat.count > 0 ? ["rl_select_environment(name) to choose one", "rl_get_current_config() after selecting, to see its fields"] : [];
  return [...select, ...unblockSteps(cat.catalog_status.state)];
}

function unblockSteps(state: CatalogResponse["catalog_status"]["state"]): string[] {
  const again = "rl_list_environments() again afterwards";
  switch (state) {
    case "ready":
      return [];
    case "no_agent":
      return ["start the rollout agent on the GPU host with this engine's name and trainer token (an operator's job; see catalog_status.detail)", again];
    case "no_runs_config":
      return ["give the agent a runs config: set ROLLOUT_RUNS_CONFIG on the GPU host and restart it (an operator's job; see catalog_status.detail)", again];
    case "scan_pending":
      return ["rl_list_environments() again in a few seconds, once the scan is reported"];
    case "scan_failed":
      return ["fix what catalog_status.detail says on the GPU host", "rl_scan_environments() to scan again", again];
    case "not_scanned":
      return ["rl_scan_environments() to ask the agent for a scan", again];
    default:
      // The schema reads states it does not list (a newer exchange's); its detail says what to do.
      return ["do what catalog_status.detail says", again];
  }
}

const NoArgs = z.object({});
const OptionalRun = z.object({ run_id: RunId.optional().describe("The run; default: the active run, else the latest one.") });
const TestInferenceArgs = StartInferenceTestRequest.extend({
  test_id: TestId.optional().describe("Give only this to read the results of a test started earlier."),
});

export const TOOLS: readonly Tool[] = [
  tool(
    "rl_list_environments",
    "List RL environments",
    "list_environments",
    NoArgs,
    "List the RL training environments on the engine's GPU host: BaseEnv subclasses found by the agent's scan, with name, class, file, description and config class. Files that could not be parsed are listed under `problems`. `catalog_status` says whether the list is current or what stands in the way (no agent connected, no runs config on the host, a scan pending or failed). Read an environment's file to learn how it loads data and scores answers before choosing.",
    catalogNextSteps,
    (ctx) => config.listEnvironments(ctx),
  ),
  tool(
    "rl_scan_environments",
    "Scan for RL environments",
    "scan_environments",
    NoArgs,
    "Ask the GPU host's agent to scan its environment directories again and report the catalog (after environments were added or fixed). It answers at once; the scan takes seconds: call rl_list_environments to see the result, or why there is none.",
    ["rl_list_environments() in a few seconds to see the catalog and its catalog_status"],
    (ctx) => config.scanEnvironments(ctx),
  ),
  tool(
    "rl_select_environment",
    "Select an RL environment",
    "select_environment",
    SelectEnvironmentRequest,
    "Select the environment for the next training run. Earlier edits of the same environment are kept unless reset_edits is true. Answers the configurable and locked fields.",
    ["rl_get_current_config() to see every field", "rl_edit_config(field, value) to change a configurable field"],
    (ctx, a) => config.selectEnvironment(ctx, a),
  ),
  tool(
    "rl_get_current_config",
    "Show the run configuration",
    "get_run_config",
    NoArgs,
    "Show the selected environment's configuration: configurable fields (type, default, description, current value), locked fields (infrastructure settings with their fixed values, which cannot be changed) and the YAML a run would get now.",
    (cfg: CurrentConfigResponse) =>
      cfg.environment === null
        ? ["rl_list_environments() to see the environments", "rl_select_environment(name) first: no environment is selected"]
        : ["rl_edit_config(field, value) to change a configurable field", "rl_start_training() when the config is right"],
    (ctx) => config.getCurrentConfig(ctx),
  ),
  tool(
    "rl_edit_config",
    "Edit one config field",
    "edit_run_config",
    EditConfigRequest,
    "Set one configurable field of the selected environment. The value must have the field's type (e.g. an integer for `int`, a list for `List[str]`). Locked fields are refused with their locked value; unknown fields are refused with the list of fields there are.",
    ["rl_get_current_config() to review", "rl_start_training() to start a run with these edits"],
    (ctx, a) => config.editConfig(ctx, a),
  ),
  tool(
    "rl_start_training",
    "Start a training run",
    "start_run",
    StartRunRequest,
    "Start a training run of the selected environment with the current config. The GPU host's agent starts the run's processes in order (e.g. trajectory API, trainer, environment), each once the previous one is ready. Only one run per engine may be active. Runs take hours: check on them with rl_check_status now and then, not in a tight loop.",
    ["rl_check_status(run_id) to watch it start", "rl_stop_training(run_id) to stop it"],
    (ctx, a) => runs.startRun(ctx, a),
  ),
  tool(
    "rl_check_status",
    "Check a run's status",
    "get_run",
    OptionalRun,
    "Status of a training run: pending, starting, running, stopping, stopped, completed or failed; each process's state, pid, exit code and last log lines; running time; the latest metrics the run wrote.",
    ["rl_get_results(run_id) once it has ended", "rl_stop_training(run_id) to stop it"],
    (ctx, a) => runs.runStatus(ctx, a.run_id),
  ),
  tool(
    "rl_stop_training",
    "Stop a training run",
    "stop_run",
    StopRunRequest.extend(OptionalRun.shape),
    "Stop a training run: its processes are stopped in reverse start order, SIGTERM first and SIGKILL after a grace period. force marks it stopped at once without waiting for the GPU host's agent (use it only when the agent is gone).",
    ["rl_check_status(run_id) until it is stopped", "rl_get_results(run_id) for what it achieved"],
    async (ctx, a) => {
      const target = await runs.runStatus(ctx, a.run_id);
      if (!target.ok) return target;
      return runs.stopRun(ctx, target.body.run_id, a);
    },
  ),
  tool(
    "rl_get_results",
    "Get a run's results",
    "get_run",
    OptionalRun,
    "Results of a training run: final metrics and their history, each process's exit and last log lines, the config YAML it ran with and its event history.",
    ["rl_list_runs() to compare with other runs", "rl_select_environment / rl_edit_config / rl_start_training for another run"],
    async (ctx, a) => {
      const target = await runs.runStatus(ctx, a.run_id);
      if (!target.ok) return target;
      return runs.runResults(ctx, target.body.run_id);
    },
  ),
  tool(
    "rl_list_runs",
    "List training runs",
    "list_runs",
    ListRunsArgs,
    "List the engine's training runs, newest first, with status and running time, and which one is active.",
    ["rl_check_status(run_id) or rl_get_results(run_id) for one run"],
    (ctx, a) => runs.listRuns(ctx, a),
  ),
  tool(
    "rl_test_inference",
    "Test the environment with real models",
    "test_inference",
    TestInferenceArgs,
    "Quick check of the selected environment before training: runs its `process` mode for num_steps steps x group_size completions against each model (OpenAI-compatible endpoints; api_key_env names the environment variable on the GPU host that holds the key; a model id alone is called on OpenRouter with OPENROUTER_API_KEY, and no models tests the seed's three there) and reports accuracy per model from the scored output. It takes minutes, so this answers at once with a test_id: call again with only test_id (or rl_get_inference_test) for the results.",
    ["rl_get_inference_test(test_id) until its status is done or failed"],
    async (ctx, a) => {
      if (a.test_id !== undefined) return inference.getInferenceTest(ctx, a.test_id);
      const { test_id: _read, ...start } = a;
      return inference.startInferenceTest(ctx, start);
    },
  ),
  tool(
    "rl_get_inference_test",
    "Read an inference test",
    "get_run",
    z.object({ test_id: TestId }),
    "An inference test started with rl_test_inference: its status and, once done, the accuracy per model. Read-only, so a viewer's agent may call it too.",
    ["rl_get_inference_test(test_id) again until its status is done or failed", "rl_start_training() once the models answer well"],
    (ctx, a) => inference.getInferenceTest(ctx, a.test_id),
  ),
  tool(
    "rl_get_capture",
    "What the exchange records of each LLM call",
    "get_ledger_config",
    z.object({}),
    "The engine's trajectory-ledger settings: capture (off, messages, or tokens: also token ids and logprobs from a vLLM or SGLang upstream, for training on exact tokens) and retention_days. Every relayed LLM call of a claimed episode is recorded accordingly; trajectories are read at GET <engine>/trajectories.",
    ["rl_set_capture(capture, retention_days) to change them (operator)"],
    (ctx) => ctx.ledgerConfig(null),
  ),
  tool(
    "rl_set_capture",
    "Change what the exchange records of each LLM call",
    "configure_ledger",
    UpdateLedgerConfigRequest,
    "Set the engine's capture mode (off, messages, tokens) and/or how many days recorded calls are kept (retention_days, 1 to 3650). Takes effect for calls admitted from now on.",
    ["rl_get_capture() to confirm"],
    (ctx, a) => ctx.ledgerConfig(a),
  ),
];

export const toolByName = (name: string): Tool | undefined => TOOLS.find((t) => t.name === name);
