/**
 * The dashboard's reads from the exchange. Answers are checked before use: an error body
 * becomes a Problem the page can explain (401, 404, ...), a network failure too, and a 2xx
 * whose JSON lacks the fields the page reads is reported rather than half-drawn.
 */
import type { CompletedTasksResponse, EngineOverview, RunningEpisodesResponse } from "../../protocol/agent";
import type { z } from "zod";
import type { EngineListResponse } from "../../protocol/admin";
import type { EngineStatusResponse, RewardHistoryResponse } from "../../protocol/swarm";
import type { HistoryRunsResponse } from "../../protocol/history";
import type { HealthResponse } from "../../protocol/buffer";
import type { ListRunsResponse, RunStatusResponse } from "../../protocol/runs";
import type { LedgerConfig, Trajectory, TrajectoryListResponse } from "../../protocol/ledger";
import type { SyncConfig } from "../../protocol/sync";
import type { BrowserWindow } from "./dom";

export type Problem = { status: number; error: string; detail: string };
export type Result<T> = { ok: true; value: T } | { ok: false; problem: Problem };
type Guard<T> = (v: unknown) => v is T;
export type EngineList = z.infer<typeof EngineListResponse>;
export type Health = z.infer<typeof HealthResponse>;
export type RunList = z.infer<typeof ListRunsResponse>;
/** A page of the newest runs, and the one the panel details: the active run, else the newest. */
export type RecentRuns = { list: RunList; featured: RunStatusResponse | null };
/** The trajectory list's filters the page sets: the reward chart's step (and the run it belongs to). */
export type TrajectoryFilter = { run: number | null; global_step: number | null };
/** A trajectory with the ETag it came with (null from an exchange that sends none): what the page asks again with. */
export type TaggedTrajectory = { trajectory: Trajectory; etag: string | null };

export function apiModule(win: BrowserWindow) {
  const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
  /** A guard that checks the top-level fields the page reads, by their JavaScript type. */
  const shape =
    <T>(fields: Record<string, "string" | "number" | "object" | "array" | "boolean">): Guard<T> =>
    (v: unknown): v is T =>
      isRecord(v) &&
      Object.entries(fields).every(([k, t]) => (t === "array" ? Array.isArray(v[k]) : t === "object" ? isRecord(v[k]) || v[k] === null : typeof v[k] === t));

  type Answer = { status: number; text: string; etag: string | null };

  /**
   * `held`: a read the page revalidates itself, with the ETag of the answer it holds (null: none
   * yet) sent as If-None-Match, answered 304 with no text while it is current. Kept out of the
   * browser's cache, which would hold a second copy of a trajectory of many MB.
   */
  async function getText(path: string, token: string, held?: { etag: string | null }): Promise<Result<Answer>> {
    try {
      const headers: Record<string, string> = { authorization: `Bearer ${token}` };
      if (held !== undefined && held.etag !== null) headers["if-none-match"] = held.etag;
      const res = await win.fetch(path, { headers, ...(held === undefined ? {} : { cache: "no-store" as const }) });
      return { ok: true, value: { status: res.status, text: await res.text(), etag: res.headers.get("etag") } };
    } catch (e) {
      return { ok: false, problem: { status: 0, error: "network", detail: e instanceof Error ? e.message : String(e) } };
    }
  }

  /** An error answer as a Problem: its JSON's error and detail when it has them. */
  function refusal({ status, text }: Answer): Problem {
    let body: unknown = null;
    try {
      body = JSON.parse(text);
    } catch {
      // Not JSON (a proxy's page): its start is the detail.
    }
    const err = isRecord(body) && typeof body["error"] === "string" ? body : { error: "http_error", detail: text.slice(0, 200) };
    return { status, error: String(err["error"]), detail: typeof err["detail"] === "string" ? err["detail"] : "" };
  }

  async function getJson<T>(path: string, token: string, guard: Guard<T>): Promise<Result<T>> {
    const r = await getText(path, token);
    return r.ok ? parsed(path, r.value, guard) : r;
  }

  /** A 2xx's JSON checked by `guard`, or the Problem it makes. */
  function parsed<T>(path: string, answer: Answer, guard: Guard<T>): Result<T> {
    const { status, text } = answer;
    if (status < 200 || status > 299) return { ok: false, problem: refusal(answer) };
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      return { ok: false, problem: { status, error: "bad_response", detail: `expected JSON from ${path}, got: ${text.slice(0, 120)}` } };
    }
    if (!guard(body)) return { ok: false, problem: { status, error: "bad_response", detail: `unexpected answer from ${path}` } };
    return { ok: true, value: body };
  }

  const base = (engine: string) => `/e/${encodeURIComponent(engine)}`;

  const runs = (engine: string, token: string, limit: number) =>
    getJson<RunList>(`${base(engine)}/runs?limit=${limit}`, token, shape({ runs: "array", count: "number" }));
  const run = (engine: string, token: string, runId: string) =>
    getJson<RunStatusResponse>(`${base(engine)}/runs/${encodeURIComponent(runId)}`, token, shape({ run_id: "string", status: "string", processes: "array" }));

  /** The list, then the featured run's processes and metrics: one read for the panel, as a failure of either fails it. */
  async function recentRuns(engine: string, token: string, limit: number): Promise<Result<RecentRuns>> {
    const list = await runs(engine, token, limit);
    if (!list.ok) return list;
    const id = list.value.active_run_id ?? list.value.runs[0]?.run_id ?? null;
    if (id === null) return { ok: true, value: { list: list.value, featured: null } };
    const one = await run(engine, token, id);
    return one.ok ? { ok: true, value: { list: list.value, featured: one.value } } : one;
  }

  return {
    overview: (engine: string, token: string) =>
      getJson<EngineOverview>(`${base(engine)}/overview`, token, shape({ engine_status: "string", episodes: "object", deliveries: "object", agent: "object" })),
    status: (engine: string, token: string) =>
      getJson<EngineStatusResponse>(`${base(engine)}/get_engine_status`, token, shape({ engine_status: "string" })),
    /** One run's reward history: the current run's when `run` is null. */
    rewardHistory: (engine: string, token: string, run: number | null) =>
      getJson<RewardHistoryResponse>(`${base(engine)}/get_reward_history${run === null ? "" : `?run=${run}`}`, token, shape({ history: "array" })),
    /** The newest runs of the history, for the reward chart's picker. */
    historyRuns: (engine: string, token: string) => getJson<HistoryRunsResponse>(`${base(engine)}/history/runs?limit=50`, token, shape({ runs: "array" })),
    runningEpisodes: (engine: string, token: string, limit: number, cursor: string | null) =>
      getJson<RunningEpisodesResponse>(
        `${base(engine)}/running_episodes?limit=${limit}${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`,
        token,
        shape({ episodes: "array", total: "number" }),
      ),
    /** The current step's tasks, grouped by the engine: cheap whatever the number of claims. */
    completedTasks: (engine: string, token: string) =>
      getJson<CompletedTasksResponse>(`${base(engine)}/completed_tasks`, token, shape({ tasks: "array" })),
    /** The rollout buffer's counts and settings: a handful of counters, whatever the number of groups. */
    health: (engine: string, token: string) => getJson<Health>(`${base(engine)}/health`, token, shape({ status: "string", buffer: "object" })),
    /** The newest `limit` runs (the API pages them, newest first) with the featured one's detail. */
    recentRuns,
    /** What the engine's gateway records of each LLM call, and for how long: readable by every role. */
    ledgerConfig: (engine: string, token: string) => getJson<LedgerConfig>(`${base(engine)}/ledger/config`, token, shape({ capture: "string", retention_days: "number" })),
    /** How long a weight sync may take before the page calls it long (max_sync_seconds). */
    syncConfig: (engine: string, token: string) => getJson<SyncConfig>(`${base(engine)}/sync/config`, token, shape({ max_sync_seconds: "number" })),
    /** A page of ended trajectories, newest first; refused (403) to client tokens. */
    trajectories: (engine: string, token: string, limit: number, cursor: string | null, f: TrajectoryFilter) => {
      const q = new URLSearchParams({ limit: String(limit) });
      if (f.run !== null) q.set("run", String(f.run));
      if (f.global_step !== null) q.set("global_step", String(f.global_step));
      if (cursor !== null) q.set("cursor", cursor);
      return getJson<TrajectoryListResponse>(`${base(engine)}/trajectories?${q.toString()}`, token, shape({ trajectories: "array" }));
    },
    /**
     * One claim's trajectory with its calls, in the delta form: the episode's latest claim when `fence` is null.
     * "unchanged" when `held` (the ETag of the one the page holds) is still the current one: a
     * live claim's trajectory is asked for on every refresh and grows past megabytes.
     */
    trajectory: async (engine: string, token: string, episode: string, fence: number | null, held: string | null): Promise<Result<TaggedTrajectory | "unchanged">> => {
      // The delta form: linear in the claim's turns (delta-messages.ts makes the call shown whole).
      const path = `${base(engine)}/trajectories/${encodeURIComponent(episode)}${fence === null ? "" : `/${fence}`}?form=delta`;
      const r = await getText(path, token, { etag: held });
      if (!r.ok) return r;
      if (r.value.status === 304) return { ok: true, value: "unchanged" };
      const t = parsed(path, r.value, shape<Trajectory>({ episode_uuid: "string", fence: "number", calls: "array" }));
      return t.ok ? { ok: true, value: { trajectory: t.value, etag: r.value.etag } } : t;
    },
    /** One medium a trajectory's messages name by `rx-media:sha256:<hex>`: the string the client sent (a data: URL). */
    media: async (engine: string, token: string, sha256: string): Promise<Result<string>> => {
      const r = await getText(`${base(engine)}/trajectories/media/${sha256}`, token);
      if (!r.ok) return r;
      return r.value.status === 200 ? { ok: true, value: r.value.text } : { ok: false, problem: refusal(r.value) };
    },
    /** Succeeds only for the deployment's admin token. */
    engines: (adminToken: string) => getJson<EngineList>("/admin/engines", adminToken, shape({ engines: "array" })),
  };
}
export type Api = ReturnType<typeof apiModule>;
