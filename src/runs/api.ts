/**
 * The training-runs API as data, like the engine's ENGINE_API: method, path (below the
 * engine's base URL), operation (and so the roles allowed), input and response schemas, and
 * the operation it calls. The router (routes.ts) and the OpenAPI paths (openapi.ts) are both
 * generated from this table.
 */
import { z } from "zod";
import type { EngineOp } from "../auth/roles";
import {
  AgentActiveRunsResponse,
  CatalogReport,
  CatalogResponse,
  CurrentConfigResponse,
  EditConfigRequest,
  EditConfigResponse,
  InferenceTestReport,
  InferenceTestView,
  ListRunsQuery,
  ListRunsResponse,
  LockedFieldsResponse,
  RunId,
  RunReport,
  RunReportResponse,
  RunResultsResponse,
  RunStatusResponse,
  ScanResponse,
  SelectEnvironmentRequest,
  SelectEnvironmentResponse,
  SetLockedFieldsRequest,
  StartInferenceTestRequest,
  StartInferenceTestResponse,
  StartRunRequest,
  StartRunResponse,
  StopRunRequest,
  StopRunResponse,
  TestId,
} from "../protocol/runs";
import * as config from "./config-ops";
import type { RunsCtx } from "./context";
import * as inference from "./inference-ops";
import type { RunsReply } from "./reply";
import * as runs from "./run-ops";

export type RunInput = { from: "body"; schema: z.ZodType; emptyAs?: unknown } | { from: "query"; schema: z.ZodType } | { from: "none" };

export type RunRouteSpec = {
  method: "get" | "post";
  /** Hono's form, below the engine's base URL: `/runs/:run_id/stop`. */
  path: string;
  op: EngineOp;
  summary: string;
  input: RunInput;
  /** Path parameters and their formats; a value that does not fit names nothing (404). */
  params: Record<string, z.ZodType<string>>;
  response: z.ZodType;
  handle: (ctx: RunsCtx, input: unknown, params: Record<string, string>) => Promise<RunsReply<unknown>>;
};

const EmptyObject = z.object({}).loose();

function route<I>(
  method: "get" | "post",
  path: string,
  op: EngineOp,
  summary: string,
  input: RunInput & { schema?: z.ZodType<I> },
  response: z.ZodType,
  handle: (ctx: RunsCtx, input: I, params: Record<string, string>) => Promise<RunsReply<unknown>>,
): RunRouteSpec {
  const params = Object.fromEntries([...path.matchAll(/:(\w+)/g)].map((m) => [m[1] as string, m[1] === "test_id" ? TestId : RunId]));
  return { method, path, op, summary, input, params, response, handle: (ctx, i, p) => handle(ctx, i as I, p) };
}

const none = { from: "none" } as const;
const body = <S extends z.ZodType>(schema: S, emptyAs?: unknown) => ({ from: "body" as const, schema, ...(emptyAs !== undefined ? { emptyAs } : {}) });

/** Static paths come before `/runs/:run_id`, which would otherwise also match them. */
export const RUNS_API: RunRouteSpec[] = [
  // Environments and configuration
  route("get", "/runs/environments", "list_environments", "The environments the agent found on the GPU host, and files it could not read.", none, CatalogResponse, (ctx) =>
    config.listEnvironments(ctx),
  ),
  route("post", "/runs/environments/scan", "scan_environments", "Ask the agent to scan its environment directories again and report the catalog.", body(EmptyObject, {}), ScanResponse, (ctx) =>
    config.scanEnvironments(ctx),
  ),
  route("get", "/runs/config", "get_run_config", "The selected environment's configurable and locked fields, the edits, and the YAML a run would get.", none, CurrentConfigResponse, (ctx) =>
    config.getCurrentConfig(ctx),
  ),
  route("post", "/runs/config/environment", "select_environment", "Select the environment of the next run (earlier edits of it are kept unless reset_edits).", body(SelectEnvironmentRequest), SelectEnvironmentResponse, (ctx, b) =>
    config.selectEnvironment(ctx, b),
  ),
  route("post", "/runs/config/edit", "edit_run_config", "Set one config field of the selected environment; unknown, locked and wrongly typed values are refused.", body(EditConfigRequest), EditConfigResponse, (ctx, b) =>
    config.editConfig(ctx, b),
  ),
  route("post", "/runs/config/locked", "set_locked_fields", "Set or remove locked fields (infrastructure settings that edits cannot change).", body(SetLockedFieldsRequest), LockedFieldsResponse, (ctx, b) =>
    config.setLockedFields(ctx, b),
  ),

  // Runs
  route("get", "/runs", "list_runs", "The engine's runs, newest first.", { from: "query", schema: ListRunsQuery }, ListRunsResponse, (ctx, q: ListRunsQuery) => runs.listRuns(ctx, q)),
  route("post", "/runs/start", "start_run", "Start a run of the selected environment with the current edits (refused while another run is active).", body(StartRunRequest, {}), StartRunResponse, (ctx, b) =>
    runs.startRun(ctx, b),
  ),

  // Inference tests
  route("post", "/runs/inference_tests", "test_inference", "Queue an inference test of the selected environment against OpenAI-compatible endpoints.", body(StartInferenceTestRequest), StartInferenceTestResponse, (ctx, b) =>
    inference.startInferenceTest(ctx, b),
  ),
  route("get", "/runs/inference_tests/:test_id", "get_run", "An inference test's status and, once done, its accuracy per model.", none, InferenceTestView, (ctx, _i, p) =>
    inference.getInferenceTest(ctx, p["test_id"] as string),
  ),

  // The GPU host's agent
  route("get", "/runs/agent/active", "agent_report_run", "The engine's active runs with their processes, for an agent that (re)starts.", none, AgentActiveRunsResponse, (ctx) =>
    runs.agentActiveRuns(ctx),
  ),
  route("post", "/runs/agent/catalog", "agent_report_catalog", "The agent reports the environments it found (replaces the catalog).", body(CatalogReport), z.object({ success: z.literal(true), count: z.number().int() }), (ctx, b) =>
    config.reportCatalog(ctx, b),
  ),
  route("post", "/runs/agent/runs/:run_id", "agent_report_run", "The agent reports a run's status, processes and metrics; the answer says whether it must stop the run.", body(RunReport), RunReportResponse, (ctx, b, p) =>
    runs.agentReport(ctx, p["run_id"] as string, b),
  ),
  route("post", "/runs/agent/inference_tests/:test_id", "agent_report_inference_test", "The agent reports an inference test's progress or results.", body(InferenceTestReport), InferenceTestView, (ctx, b, p) =>
    inference.agentReportInferenceTest(ctx, p["test_id"] as string, b),
  ),

  // One run
  route("get", "/runs/:run_id", "get_run", "A run's status: its processes, running time and latest metrics.", none, RunStatusResponse, (ctx, _i, p) => runs.runStatus(ctx, p["run_id"])),
  route("get", "/runs/:run_id/results", "get_run", "A run's results: final metrics and their history, log tails, config and history.", none, RunResultsResponse, (ctx, _i, p) =>
    runs.runResults(ctx, p["run_id"] as string),
  ),
  route("post", "/runs/:run_id/stop", "stop_run", "Stop a run: its processes are stopped in reverse order, SIGTERM then SIGKILL.", body(StopRunRequest, {}), StopRunResponse, (ctx, b, p) =>
    runs.stopRun(ctx, p["run_id"] as string, b),
  ),
];
