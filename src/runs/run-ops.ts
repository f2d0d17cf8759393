/**
 * Run lifecycle operations for people, scripts and LLM agents (start, stop, status, results,
 * list) and for the GPU host's agent (its active runs, its reports). D1 holds every run, so
 * nothing is lost when the agent or the Worker restarts.
 */
import {
  ACTIVE_RUN_STATUSES,
  type AgentActiveRunsResponse,
  type ListRunsQuery,
  type RunReport,
  type RunReportResponse,
  type RunResultsResponse,
  type RunStatus,
  type RunStatusResponse,
  type StartRunRequest,
  type StartRunResponse,
  type StopRunRequest,
  type StopRunResponse,
} from "../protocol/runs";
import { loadDraft, unknownEnvironment } from "./config-ops";
import type { RunsCtx } from "./context";
import { applyReport, applyStop, isTerminal } from "./lifecycle";
import { storedJsonTooLarge, storedStringTooLarge, storedTooLarge, utf8Bytes } from "../protocol/limits";
import { done, refuse, tooLarge, type RunsReply } from "./reply";
import { renderYaml, staleEdits } from "./run-config";
import * as store from "./run-store";
import { loggedErrorId } from "../error-id";

function newRunId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(10));
  return `run_${[...bytes].map((b) => (b % 36).toString(36)).join("")}`;
}

const activeRefusal = (active: store.RunRow) =>
  refuse(409, "run_active", `Run ${active.id} (${active.environment}) is ${active.status}: stop it before starting another (one run per engine).`, {
    active_run_id: active.id,
    active_status: active.status,
  });

async function statusOf(ctx: RunsCtx, run: store.RunRow): Promise<RunStatusResponse> {
  const [processes, metrics] = await Promise.all([store.processesOf(ctx.db, run.id), store.latestMetrics(ctx.db, run.id)]);
  return { ...store.runView(run, ctx.now()), processes, metrics, edits: store.editsOfRun(run) };
}

export async function startRun(ctx: RunsCtx, req: StartRunRequest): Promise<RunsReply<StartRunResponse>> {
  const d = await loadDraft(ctx);
  if (d.selected === null) return refuse(409, "no_environment_selected", "No environment is selected: select one first (POST /runs/config/environment or rl_select_environment).");
  if (req.environment !== undefined && req.environment !== d.selected) {
    return refuse(409, "environment_mismatch", `The selected environment is '${d.selected}', not '${req.environment}': select '${req.environment}' first.`, {
      selected: d.selected,
    });
  }
  if (d.env === null) return unknownEnvironment(ctx, d.selected);
  const fields = d.env.fields ?? [];
  const stale = staleEdits(fields, d.locked, d.edits);
  const broken = stale.filter((s) => s.error !== "field_locked");
  if (broken.length > 0) {
    return refuse(409, "stale_edits", `Some edits no longer fit the environment's fields: ${broken.map((b) => b.detail).join(" ")} Edit them again, or select the environment with reset_edits.`, {
      stale_edits: broken.map((b) => b.field),
    });
  }
  const active = await store.activeRun(ctx.db, ctx.engine);
  if (active !== null) return activeRefusal(active);

  const now = ctx.now();
  const id = newRunId();
  const yaml = renderYaml(fields, d.locked, d.edits);
  const edits = JSON.stringify(d.edits);
  // Edits each fit, but the YAML holds them all: the run's D1 row holds it with the edits, and
  // the agent's start_run command (a row of the engine's queue) holds it escaped.
  const over = storedStringTooLarge("config_yaml", yaml) ?? storedTooLarge("config_yaml with the edits", utf8Bytes(yaml) + utf8Bytes(edits));
  if (over !== null) return tooLarge(over);
  const row: store.RunRow = {
    id,
    engine: ctx.engine,
    environment: d.env.name,
    environmentFile: d.env.file_path,
    status: "pending",
    detail: "",
    configYaml: yaml,
    edits,
    commandSeq: null,
    stopRequestedAt: null,
    agentId: "",
    createdAt: now,
    startedAt: null,
    endedAt: null,
    updatedAt: now,
  };
  try {
    await store.insertRun(ctx.db, ctx.live, row, `run of ${d.env.name} created; start queued for the agent`);
  } catch (err) {
    // Another start won the race between our check and our insert.
    if (!store.isActiveRunConflict(err)) throw err;
    const winner = await store.activeRun(ctx.db, ctx.engine);
    if (winner === null) throw err;
    return activeRefusal(winner);
  }
  const q = await ctx.enqueue("start_run", {
    kind: "start_run",
    run_id: id,
    environment: { name: d.env.name, class_name: d.env.class_name, file_path: d.env.file_path },
    config_yaml: yaml,
  });
  if (!q.ok) {
    // The run never reached the agent: it must not hold the engine. Only a stop can have
    // changed it meanwhile (the agent never heard of it), and a stop of a pending run ends it.
    await store.changeRun(ctx.db, id, "pending", { status: "failed", detail: `could not queue the start: ${q.detail}`, endedAt: now, updatedAt: now }, { at: now, kind: "failed", detail: q.detail });
    return q;
  }
  // The run is made and its start queued: no later failure of D1 may answer otherwise (the
  // caller would take the start for failed, the agent start it, a retry be refused run_active).
  // The answer is the run as it was made; its start command's seq is noted as a view's detail.
  const started: store.RunRow = { ...row, commandSeq: q.seq };
  try {
    await store.setCommandSeq(ctx.db, id, q.seq);
  } catch (err) {
    loggedErrorId(`runs: run ${id} started, but noting its start command's seq in D1 failed`, err);
  }
  return done({
    ...store.runView(started, now),
    processes: [],
    metrics: null,
    edits: store.editsOfRun(started),
    config_yaml: yaml,
    overridden_edits: stale.map((s) => s.field),
    message: `Run ${id} of ${d.env.name} is queued; the agent starts its processes in order, each after the previous one is ready. Check its status for progress.`,
  });
}

async function findRun(ctx: RunsCtx, runId: string) {
  const run = await store.getRun(ctx.db, ctx.engine, runId);
  if (run !== null) return run;
  // The ids a caller (a model, often) may have meant, as the seed's tools name them: the active run's, and the latest few.
  const [active, recent] = await Promise.all([store.activeRun(ctx.db, ctx.engine), store.listRuns(ctx.db, ctx.engine, 5, null)]);
  return refuse(404, "unknown_run", `No run '${runId}' on this engine (list them with GET /runs or rl_list_runs).`, {
    run_id: runId,
    active_runs: active === null ? [] : [active.id],
    recent_runs: recent.map((r) => r.id),
  });
}

/** The named run, or when none is named the active run, else the latest one. */
async function pickRun(ctx: RunsCtx, runId: string | undefined) {
  if (runId !== undefined) return findRun(ctx, runId);
  const run = (await store.activeRun(ctx.db, ctx.engine)) ?? (await store.latestRun(ctx.db, ctx.engine));
  return run ?? refuse(404, "no_runs", "This engine has no runs yet: start one with POST /runs/start or rl_start_training.");
}

/**
 * How many times a status change may be decided: each time another request changed the run's
 * status first, it is decided again from the run as it is now. Every status change moves a run
 * forward (pending, starting, running, stopping, then an end that never changes), so a decision
 * loses at most one race per active status.
 */
const MAX_DECISIONS = ACTIVE_RUN_STATUSES.length + 1;

/** `decide` answers null when the run's status was no longer the one it decided from. */
async function decideOnRun<T>(ctx: RunsCtx, first: store.RunRow, decide: (run: store.RunRow, attempt: number) => Promise<T | null>): Promise<T> {
  let run = first;
  for (let attempt = 0; attempt < MAX_DECISIONS; attempt++) {
    const answer = await decide(run, attempt);
    if (answer !== null) return answer;
    const current = await store.getRun(ctx.db, ctx.engine, run.id);
    if (current === null) throw new Error(`run ${run.id} vanished while its status changed`);
    run = current;
  }
  throw new Error(`run ${first.id} changed status more than ${MAX_DECISIONS - 1} times during one request`);
}

function stopChange(run: store.RunRow, next: RunStatus, req: StopRunRequest, now: number): { set: store.RunChange; event: store.RunEvent } {
  const why = req.reason ? `: ${req.reason}` : "";
  const ended = isTerminal(next) ? { endedAt: now, detail: `stopped${req.force ? " (forced)" : ""}${why}` } : {};
  return {
    set: { status: next, stopRequestedAt: run.stopRequestedAt ?? now, updatedAt: now, ...ended },
    event: { at: now, kind: req.force ? "stop_forced" : "stop_requested", detail: `${run.status} -> ${next}${why}` },
  };
}

export async function stopRun(ctx: RunsCtx, runId: string, req: StopRunRequest): Promise<RunsReply<StopRunResponse>> {
  const found = await findRun(ctx, runId);
  if ("ok" in found) return found;
  let queued = false;
  return decideOnRun(ctx, found, async (run) => {
    const out = applyStop(run.status, req.force);
    if (out.queueStop && !queued) {
      // Queued first: if D1 then fails, the agent still stops the run and reports it stopped.
      // If the run turns out to have ended meanwhile, the agent finds nothing of it left to stop
      // and reports it stopped, which changes nothing of an ended run.
      const q = await ctx.enqueue("stop_run", { kind: "stop_run", run_id: run.id, reason: req.reason || "stop requested" });
      if (!q.ok) return q;
      queued = true;
    }
    if (out.changed) {
      const { set, event } = stopChange(run, out.next, req, ctx.now());
      if (!(await store.changeRun(ctx.db, run.id, run.status, set, event))) return null;
    }
    const after = (await store.getRun(ctx.db, ctx.engine, run.id)) ?? run;
    return done({ ...store.runView(after, ctx.now()), message: out.message });
  });
}

export async function runStatus(ctx: RunsCtx, runId: string | undefined): Promise<RunsReply<RunStatusResponse>> {
  const run = await pickRun(ctx, runId);
  if ("ok" in run) return run;
  return done(await statusOf(ctx, run));
}

export async function runResults(ctx: RunsCtx, runId: string): Promise<RunsReply<RunResultsResponse>> {
  const run = await findRun(ctx, runId);
  if ("ok" in run) return run;
  const [status, history, events] = await Promise.all([statusOf(ctx, run), store.metricsHistory(ctx.db, run.id), store.eventsOf(ctx.db, run.id)]);
  return done({ ...status, config_yaml: run.configYaml, metrics_history: history, events });
}

export async function listRuns(ctx: RunsCtx, q: ListRunsQuery) {
  let before: store.RunRow | null = null;
  if (q.before !== undefined) {
    const b = await findRun(ctx, q.before);
    if ("ok" in b) return b;
    before = b;
  }
  const rows = await store.listRuns(ctx.db, ctx.engine, q.limit, before);
  const active = await store.activeRun(ctx.db, ctx.engine);
  const now = ctx.now();
  return done({ runs: rows.map((r) => store.runView(r, now)), count: rows.length, active_run_id: active?.id ?? null });
}

export async function agentActiveRuns(ctx: RunsCtx): Promise<RunsReply<AgentActiveRunsResponse>> {
  const rows = await store.activeRuns(ctx.db, ctx.engine);
  const now = ctx.now();
  const runs = await Promise.all(
    rows.map(async (r) => ({ ...store.runView(r, now), processes: await store.processesOf(ctx.db, r.id), environment_file: r.environmentFile, config_yaml: r.configYaml })),
  );
  return done({ runs });
}

export async function agentReport(ctx: RunsCtx, runId: string, report: RunReport): Promise<RunsReply<RunReportResponse>> {
  const run = await findRun(ctx, runId);
  if ("ok" in run) return run;
  const names = report.processes.map((p) => p.name);
  const twice = names.find((n, i) => names.indexOf(n) !== i);
  if (twice !== undefined) return refuse(422, "invalid_request", `processes: '${twice}' is listed twice.`);
  for (const [i, m] of report.metrics.entries()) {
    const over = storedJsonTooLarge(`metrics.${i}.values`, m.values);
    if (over !== null) return tooLarge(over);
  }
  // The processes and metrics stand whatever the run's status: they go with the first try.
  const facts = [...store.processStatements(ctx.db, run.id, report.processes), ...store.metricStatements(ctx.db, run.id, report.metrics)];
  return decideOnRun(ctx, run, async (r, attempt) => {
    const { out, set, event } = reportChange(r, report, ctx.now());
    if (!(await store.changeRun(ctx.db, r.id, r.status, set, event, attempt === 0 ? facts : []))) return null;
    return done({ run_id: r.id, status: out.next, must_stop: out.mustStop });
  });
}

function reportChange(run: store.RunRow, report: RunReport, now: number) {
  const out = applyReport(run.status, report.status);
  const set: store.RunChange = { updatedAt: now };
  if (report.agent_id) set.agentId = report.agent_id;
  if (!isTerminal(run.status) && report.detail) set.detail = report.detail;
  if (out.changed) {
    set.status = out.next;
    if (out.next === "running" && run.startedAt === null) set.startedAt = now;
    if (isTerminal(out.next)) set.endedAt = now;
  }
  const event = out.changed ? { at: now, kind: out.next, detail: `${run.status} -> ${out.next}${report.detail ? `: ${report.detail}` : ""}` } : null;
  return { out, set, event };
}
