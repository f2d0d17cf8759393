/**
 * The engine's training runs: the active run (or, with none active, the latest) with its
 * processes and latest metrics, and the few newest runs. The API pages runs and the panel asks
 * for one page, so an engine with a long history costs the same as one with a single run.
 * Data attributes carry the exact values for test-browser/.
 */
import type { JsonValue, RunStatusResponse, RunView } from "../../protocol/runs";
import type { RecentRuns } from "./api";
import type { Dom, DomElement } from "./dom";
import type { Format } from "./format";
import type { ActivityView } from "./activity-view";

type Process = RunStatusResponse["processes"][number];

export function runsViewModule(dom: Dom, fmt: Format, empty: ActivityView["empty"]) {
  const { h } = dom;
  /** A run may have up to 64 processes and any number of metrics; past these the panel says how many more. */
  const MAX_PROCESSES = 12;
  const MAX_METRICS = 8;

  /** Colour family of a run's status: red only for a failure. */
  function runTone(status: RunView["status"]): string {
    if (status === "running" || status === "completed") return "good";
    if (status === "failed") return "bad";
    if (status === "stopped") return "off";
    return "busy";
  }

  function processTone(state: Process["state"]): string {
    if (state === "ready") return "good";
    if (state === "failed") return "bad";
    if (state === "exited" || state === "stopped") return "off";
    return "busy";
  }

  const pill = (tone: string, text: string): DomElement => h("span", { class: `pill ${tone}` }, text);

  /** Metric values are whatever the run's processes wrote: numbers as numbers, anything else as short JSON. */
  function metricText(v: JsonValue): string {
    if (typeof v === "number") return fmt.num(v);
    const text = typeof v === "string" ? v : JSON.stringify(v);
    return text.length > 40 ? `${text.slice(0, 39)}…` : text;
  }

  function when(r: RunView, nowMs: number): string {
    if (r.started_at === null) return r.ended_at === null ? `created ${fmt.ago(r.created_at, nowMs)}` : `ended ${fmt.ago(r.ended_at, nowMs)}, never started`;
    const ran = fmt.duration(r.running_time_seconds ?? 0);
    return r.ended_at === null ? `running for ${ran}` : `ran ${ran}, ended ${fmt.ago(r.ended_at, nowMs)}`;
  }

  function processes(list: readonly Process[], nowMs: number): DomElement {
    if (list.length === 0) return h("p", { class: "sub", id: "run-processes-none" }, "No process reported yet: the agent starts them in order once it takes the run.");
    const sorted = [...list].sort((a, b) => a.order - b.order);
    return h(
      "div",
      {},
      h(
        "table",
        { id: "run-processes", "data-count": list.length },
        h("thead", {}, h("tr", {}, h("th", {}, "Process"), h("th", {}, "State"), h("th", { class: "num" }, "PID"), h("th", {}, "Since"))),
        h(
          "tbody",
          {},
          ...sorted.slice(0, MAX_PROCESSES).map((p) => {
            const since = p.ended_at ?? p.ready_at ?? p.started_at;
            const exit = p.exit_code !== null ? `exit ${p.exit_code}` : p.signal !== null ? p.signal : null;
            return h(
              "tr",
              { "data-process": p.name, "data-state": p.state, title: p.detail || p.command },
              h("td", { class: "mono" }, p.name),
              h("td", {}, pill(processTone(p.state), exit === null ? p.state : `${p.state}, ${exit}`)),
              h("td", { class: "num" }, p.pid === null ? "–" : String(p.pid)),
              h("td", {}, since === null ? "–" : fmt.ago(since, nowMs)),
            );
          }),
        ),
      ),
      list.length > MAX_PROCESSES ? h("p", { class: "more" }, `and ${list.length - MAX_PROCESSES} more processes`) : null,
    );
  }

  function metrics(point: RunStatusResponse["metrics"], runId: string, nowMs: number): DomElement {
    if (point === null) return h("p", { class: "sub", id: "run-metrics-none" }, "No metrics yet: the run's processes append JSON lines to its metrics file.");
    const entries = Object.entries(point.values).sort(([a], [b]) => a.localeCompare(b));
    return h(
      "div",
      { id: "run-metrics", "data-step": point.step ?? "", "data-index": point.index },
      h("p", { class: "sub" }, `Latest metrics${point.step === null ? "" : `, step ${point.step}`}, ${fmt.ago(point.at, nowMs)}`),
      h(
        "dl",
        { class: "figures" },
        ...entries.slice(0, MAX_METRICS).map(([k, v]) => h("div", { "data-metric": k, "data-value": JSON.stringify(v), title: `${k}: ${JSON.stringify(v)}` }, h("dt", {}, k), h("dd", {}, metricText(v)))),
      ),
      entries.length > MAX_METRICS ? h("p", { class: "more" }, `and ${entries.length - MAX_METRICS} more (GET /runs/${runId}/results has them all)`) : null,
    );
  }

  function current(run: RunStatusResponse, active: boolean, nowMs: number): DomElement {
    return h(
      "div",
      { id: "run-current", class: "run-current", "data-run": run.run_id, "data-status": run.status, "data-active": String(active) },
      h(
        "p",
        { class: "run-head" },
        h("strong", {}, active ? "Active run" : "Latest run"),
        h("span", { class: "mono", title: run.run_id }, run.run_id),
        h("span", { id: "run-environment" }, run.environment),
        pill(runTone(run.status), run.status),
      ),
      h("p", { class: "sub" }, [when(run, nowMs), run.detail].filter((x) => x !== "").join(" · ")),
      processes(run.processes, nowMs),
      metrics(run.metrics, run.run_id, nowMs),
    );
  }

  function recent(runs: readonly RunView[], featured: string | null, older: boolean, nowMs: number): DomElement {
    return h(
      "div",
      { class: "recent-runs" },
      h("h3", {}, "Recent runs"),
      h(
        "table",
        { id: "runs-table", "data-count": runs.length },
        h(
          "tbody",
          {},
          ...runs.map((r) =>
            h(
              "tr",
              { "data-run": r.run_id, "data-status": r.status, class: r.run_id === featured ? "current" : null },
              // Shown whole (the exchange makes them run_ and ten characters), to be copied into GET /runs/<id>.
              h("td", { class: "mono run-id", title: r.run_id }, r.run_id),
              h("td", {}, r.environment),
              h("td", {}, pill(runTone(r.status), r.status)),
              h("td", { class: "when" }, when(r, nowMs)),
            ),
          ),
        ),
      ),
      older ? h("p", { class: "more", id: "runs-older" }, "Older runs: GET /runs?before=<run id>") : null,
    );
  }

  /** `shown` runs at most; the read asked for one more, so a longer list means older runs exist. */
  function render(data: RecentRuns, shown: number, nowMs: number): DomElement {
    const { list, featured } = data;
    if (list.runs.length === 0) {
      return empty("runs-empty", "No training runs", "Runs started with POST /runs/start (or the MCP tool rl_start_training) show up here with their processes and metrics.");
    }
    return h(
      "div",
      { id: "runs-summary", "data-active": list.active_run_id ?? "" },
      featured === null ? null : current(featured, featured.run_id === list.active_run_id, nowMs),
      recent(list.runs.slice(0, shown), featured?.run_id ?? null, list.runs.length > shown, nowMs),
    );
  }

  return { render };
}
export type RunsView = ReturnType<typeof runsViewModule>;
