/**
 * What is happening in the current step: the reward curve so far, the running episodes a page
 * at a time (never the whole table: an engine may hold thousands), and the tasks finished in
 * this step as a ranked bar list.
 */
import type { CompletedTasksResponse, RunningEpisodesResponse } from "../../protocol/agent";
import type { RewardHistoryEntry } from "../../protocol/swarm";
import type { HistoryRun } from "../../protocol/history";
import type { Dom, DomElement, DomInput } from "./dom";
import type { Format } from "./format";
import type { BarsModule } from "./bars";
import type { ChartModule } from "./chart";

export type Pager = { page: number; pageSize: number; hasPrev: boolean; onPrev: () => void; onNext: () => void; onOpen: (episode: string, fence: number) => void };

export function activityViewModule(dom: Dom, fmt: Format, bars: BarsModule, chart: ChartModule) {
  const { h } = dom;

  const empty = (id: string, title: string, text: string): DomElement =>
    h("div", { class: "empty", id }, h("p", { class: "empty-title" }, title), h("p", {}, text));

  /** What the picker says of a run: its number, how it began and how far it got. */
  function runLabel(r: HistoryRun): string {
    const began = r.began.replace(/_/g, " ");
    const steps = r.steps === 0 ? "no steps yet" : `${r.steps} step${r.steps === 1 ? "" : "s"}${r.last_mean_reward === null ? "" : `, last mean ${fmt.num(r.last_mean_reward)}`}`;
    return `run ${r.run}${r.current ? " (current)" : ""} · ${began}${r.training_run_id ? ` ${r.training_run_id}` : ""} · ${steps}`;
  }

  /** Picks the run whose curve is shown: the current one unless the reader chose another. */
  function runPicker(runs: readonly HistoryRun[], shown: number | null, onPick: (run: number | null) => void): DomElement {
    const select = h(
      "select",
      { id: "run-picker", "aria-label": "Run of the history" },
      ...runs.map((r) => h("option", { value: r.current ? "" : String(r.run), selected: r.run === shown }, runLabel(r))),
    ) as DomInput;
    select.addEventListener("change", () => onPick(select.value === "" ? null : Number(select.value)));
    return h("label", { class: "run-picker" }, "showing ", select);
  }

  /**
   * The reward curve of one run of the history (`shown`), with a picker for the others. The
   * history is in the order it was written, so its last entry is the latest step.
   */
  function rewards(
    history: readonly RewardHistoryEntry[],
    runs: readonly HistoryRun[],
    shown: number | null,
    onPick: (run: number | null) => void,
    onStep: ((step: number) => void) | null,
  ): DomElement {
    const picker = runs.length > 1 ? runPicker(runs, shown, onPick) : null;
    if (history.length === 0) {
      return h(
        "div",
        { "data-run": shown ?? "" },
        picker,
        empty(
          "reward-empty",
          "No reward history yet",
          "The curve appears once the trainer finishes its first global step: rewards of the step's train episodes are summarized when global_step advances.",
        ),
      );
    }
    const last = history[history.length - 1]!;
    return h(
      "div",
      { "data-run": shown ?? "" },
      picker,
      h(
        "p",
        { class: "chart-summary" },
        h("span", { class: "key mean" }),
        "mean reward ",
        h("span", { class: "key band" }),
        "± 1 std",
        h(
          "span",
          { class: "latest" },
          `latest: step ${last.global_step}, mean ${fmt.num(last.mean_reward)} ± ${fmt.num(last.std_reward)} over ${last.count} episodes`,
        ),
      ),
      chart.render(history, onStep),
    );
  }

  function episodes(page: RunningEpisodesResponse, pager: Pager): DomElement {
    if (page.total === 0) return empty("episodes-empty", "No episode is running", "Episodes show up here while a client holds a claim on them.");
    const from = pager.page * pager.pageSize + 1;
    const to = from + page.episodes.length - 1;
    return h(
      "div",
      {},
      h(
        "table",
        { id: "episodes-table", "data-total": page.total },
        h(
          "thead",
          {},
          h("tr", {}, h("th", {}, "Client"), h("th", {}, "Episode"), h("th", {}, "Task"), h("th", { class: "idle" }, "Idle / timeout"), h("th", { class: "num" }, "LLM calls")),
        ),
        h(
          "tbody",
          {},
          ...page.episodes.map((e) =>
            h(
              "tr",
              { class: "clickable", "data-episode": e.episode_uuid, "data-client": e.client_uuid, "data-llm-calls": e.llm_call_count, onclick: () => pager.onOpen(e.episode_uuid, e.fence) },
              h("td", { title: e.client_uuid, class: "mono" }, fmt.shortId(e.client_uuid)),
              h("td", { class: "mono" }, h("button", { type: "button", class: "link mono", title: `${e.episode_uuid}: open its calls so far` }, fmt.shortId(e.episode_uuid))),
              h("td", { title: e.task_id }, e.task_id === "" ? "–" : fmt.shortId(e.task_id)),
              h(
                "td",
                { class: "idle" },
                bars.idleMeter(e.idle_seconds, e.discard_episode_timeout),
                h("span", {}, `${fmt.duration(e.idle_seconds)} / ${fmt.duration(e.discard_episode_timeout)}`),
              ),
              h("td", { class: "num" }, String(e.llm_call_count)),
            ),
          ),
        ),
      ),
      h(
        "div",
        { class: "pager" },
        h("span", { id: "episodes-range" }, `${from}–${to} of ${fmt.count(page.total)} running, soonest to expire first`),
        h("button", { type: "button", id: "episodes-prev", disabled: !pager.hasPrev, onclick: pager.onPrev }, "‹ Previous"),
        h("button", { type: "button", id: "episodes-next", disabled: page.next_cursor === null, onclick: pager.onNext }, "Next ›"),
      ),
    );
  }

  function tasks(done: CompletedTasksResponse): DomElement {
    // A task listed for its failed claims alone has no episode finished: it is counted apart.
    const rows = done.tasks
      .filter((t) => t.episodes > 0)
      .map((t) => ({
        label: t.task_id,
        value: t.episodes,
        title: `${t.task_id}: ${t.episodes} episodes by ${t.clients} clients, mean reward ${t.mean_reward === null ? "none" : t.mean_reward.toFixed(3)}${t.failed > 0 ? `, ${t.failed} failed claims` : ""}`,
      }));
    const failed = done.tasks.reduce((a, t) => a + t.failed, 0);
    const failures = failed === 0 ? "" : `; ${fmt.count(failed)} claims failed (failed_infra, aborted or reaped)`;
    if (rows.length === 0) return empty("tasks-empty", "No task completed yet", `Each task's finished train episodes of the current global step are counted here${failures}.`);
    const episodes = rows.reduce((a, r) => a + r.value, 0);
    return h(
      "div",
      { id: "tasks", "data-tasks": rows.length, "data-episodes": episodes },
      h("p", { class: "sub" }, `${fmt.count(episodes)} episodes finished over ${fmt.count(rows.length)} tasks${failures}`),
      bars.ranked(rows, 12),
    );
  }

  return { rewards, episodes, tasks, empty };
}
export type ActivityView = ReturnType<typeof activityViewModule>;
