/**
 * A typed client for an engine's training-runs API (src/runs). Requests are typed by the
 * protocol's zod schemas and answers are checked against them. A refusal is thrown as a
 * RunsRefusal, which keeps the hints the exchange sends with it (the locked value, the
 * fields or environments there are, the active run).
 */
import { z } from "zod";
import {
  AgentActiveRunsResponse,
  CatalogResponse,
  CurrentConfigResponse,
  EditConfigResponse,
  InferenceTestView,
  ListRunsResponse,
  LockedFieldsResponse,
  RunReportResponse,
  RunResultsResponse,
  RunStatusResponse,
  ScanResponse,
  SelectEnvironmentResponse,
  StartRunResponse,
  StopRunResponse,
  CatalogReport,
  InferenceTestReport,
  RunReport,
  SelectEnvironmentRequest,
  SetLockedFieldsRequest,
  StartInferenceTestRequest,
  StartInferenceTestResponse,
  StartRunRequest,
  StopRunRequest,
  type JsonValue,
} from "../protocol/runs";
import { ExchangeError, pathSegment, requestJson, type FetchLike } from "./http";

export class RunsRefusal extends ExchangeError {
  constructor(
    status: number,
    code: string,
    detail: string,
    readonly hints: Record<string, unknown>,
    retryAfterSeconds: number | null = null,
  ) {
    super(status, code, detail, retryAfterSeconds);
    this.name = "RunsRefusal";
  }
}

export type RunsClientOptions = {
  /** The engine's base URL: `https://host/e/<engine>`, or `.../e/<engine>/t/<token>`. */
  baseUrl: string;
  token?: string;
  fetch?: FetchLike;
};

const Success = z.object({ success: z.literal(true), count: z.number().int() });
const Refusal = z.object({ error: z.string(), detail: z.string() }).loose();

/** Request types as the wire accepts them: fields with defaults may be omitted. */
type In<T extends z.ZodType> = z.input<T>;

export class RunsClient {
  private readonly base: string;
  private readonly fetchFn: FetchLike;

  constructor(private readonly opts: RunsClientOptions) {
    this.base = opts.baseUrl.replace(/\/+$/, "");
    this.fetchFn = opts.fetch ?? ((input, init) => fetch(input, init));
  }

  private call<S extends z.ZodType>(method: "GET" | "POST", path: string, schema: S, body?: unknown, signal?: AbortSignal): Promise<z.output<S>> {
    return requestJson(this.fetchFn, this.base + path, schema, {
      method,
      body,
      token: this.opts.token,
      signal,
      // A refusal keeps the hints the exchange sends with it (the locked value, the known fields).
      refusal: (status, json, retryAfterSeconds) => {
        const r = Refusal.safeParse(json);
        if (!r.success) return null;
        const { error, detail, ...hints } = r.data;
        return new RunsRefusal(status, error, detail, hints, retryAfterSeconds);
      },
    });
  }

  // Environments and configuration
  listEnvironments() {
    return this.call("GET", "/runs/environments", CatalogResponse);
  }
  scanEnvironments() {
    return this.call("POST", "/runs/environments/scan", ScanResponse, {});
  }
  getConfig() {
    return this.call("GET", "/runs/config", CurrentConfigResponse);
  }
  selectEnvironment(req: In<typeof SelectEnvironmentRequest>) {
    return this.call("POST", "/runs/config/environment", SelectEnvironmentResponse, req);
  }
  editConfig(field: string, value: JsonValue) {
    return this.call("POST", "/runs/config/edit", EditConfigResponse, { field, value });
  }
  setLockedFields(req: In<typeof SetLockedFieldsRequest>) {
    return this.call("POST", "/runs/config/locked", LockedFieldsResponse, req);
  }

  // Runs
  startRun(req: In<typeof StartRunRequest> = {}) {
    return this.call("POST", "/runs/start", StartRunResponse, req);
  }
  listRuns(q: { limit?: number; before?: string } = {}) {
    const qs = new URLSearchParams(Object.entries(q).flatMap(([k, v]): Array<[string, string]> => (v === undefined ? [] : [[k, String(v)]]))).toString();
    return this.call("GET", `/runs${qs ? `?${qs}` : ""}`, ListRunsResponse);
  }
  async runStatus(runId: string) {
    return this.call("GET", `/runs/${pathSegment("run_id", runId)}`, RunStatusResponse);
  }
  async runResults(runId: string) {
    return this.call("GET", `/runs/${pathSegment("run_id", runId)}/results`, RunResultsResponse);
  }
  async stopRun(runId: string, req: In<typeof StopRunRequest> = {}) {
    return this.call("POST", `/runs/${pathSegment("run_id", runId)}/stop`, StopRunResponse, req);
  }

  // Inference tests
  startInferenceTest(req: In<typeof StartInferenceTestRequest>) {
    return this.call("POST", "/runs/inference_tests", StartInferenceTestResponse, req);
  }
  async inferenceTest(testId: string) {
    return this.call("GET", `/runs/inference_tests/${pathSegment("test_id", testId)}`, InferenceTestView);
  }

  // The GPU host's agent (trainer token)
  reportCatalog(report: In<typeof CatalogReport>, signal?: AbortSignal) {
    return this.call("POST", "/runs/agent/catalog", Success, report, signal);
  }
  activeRuns(signal?: AbortSignal) {
    return this.call("GET", "/runs/agent/active", AgentActiveRunsResponse, undefined, signal);
  }
  async reportRun(runId: string, report: In<typeof RunReport>, signal?: AbortSignal) {
    return this.call("POST", `/runs/agent/runs/${pathSegment("run_id", runId)}`, RunReportResponse, report, signal);
  }
  async reportInferenceTest(testId: string, report: In<typeof InferenceTestReport>, signal?: AbortSignal) {
    return this.call("POST", `/runs/agent/inference_tests/${pathSegment("test_id", testId)}`, InferenceTestView, report, signal);
  }
}
