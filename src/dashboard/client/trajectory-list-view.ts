/**
 * The newest ended trajectories (one row per claim), a page at a time: "More" appends the next
 * older page by the API's cursor. A row opens its episode. The reward chart can narrow the list
 * to one global step; the panel says so and offers the way back.
 */
import type { TrajectorySummary } from "../../protocol/ledger";
import type { TrajectoryFilter } from "./api";
import type { Dom, DomElement } from "./dom";
import type { Format } from "./format";
import type { ActivityView } from "./activity-view";

export type TrajectoryListState = {
  rows: readonly TrajectorySummary[];
  /** Whether an older page exists. */
  more: boolean;
  /** Older pages were loaded: the list stays as read until the reader goes back to the newest. */
  pinned: boolean;
  filter: TrajectoryFilter;
  /** The claim open in the episode view, highlighted here. */
  open: { episode: string; fence: number | null } | null;
};

export type TrajectoryListHandlers = {
  onOpen: (episode: string, fence: number) => void;
  onMore: () => void;
  onNewest: () => void;
  onClearFilter: () => void;
};

export function trajectoryListViewModule(dom: Dom, fmt: Format, empty: ActivityView["empty"]) {
  const { h } = dom;

  const tone = (o: TrajectorySummary["outcome"]): string => (o === "ended" ? "good" : o === "reaped" ? "bad" : "busy");

  function row(t: TrajectorySummary, nowMs: number, open: TrajectoryListState["open"], onOpen: TrajectoryListHandlers["onOpen"]): DomElement {
    const isOpen = open !== null && open.episode === t.episode_uuid && (open.fence === null || open.fence === t.fence);
    return h(
      "tr",
      {
        class: `clickable${isOpen ? " current" : ""}`,
        "data-episode": t.episode_uuid,
        "data-fence": t.fence,
        "data-task": t.task_id,
        "data-outcome": t.outcome,
        "data-reward": t.reward ?? "",
        "data-calls": t.calls,
        "data-prompt-tokens": t.prompt_tokens,
        "data-completion-tokens": t.completion_tokens,
        "data-ended-at": t.ended_at,
        onclick: () => onOpen(t.episode_uuid, t.fence),
      },
      h(
        "td",
        { class: "mono" },
        h("button", { type: "button", class: "link mono", title: `${t.episode_uuid} (fence ${t.fence}, client ${t.client_uuid})` }, fmt.shortId(t.episode_uuid)),
        t.fence > 0 ? h("span", { class: "muted" }, ` #${t.fence}`) : null,
      ),
      h("td", { title: t.task_id }, t.task_id === "" ? "–" : fmt.shortId(t.task_id)),
      h("td", { class: "num" }, t.global_step === null ? "–" : String(t.global_step)),
      h("td", {}, h("span", { class: `pill ${tone(t.outcome)}` }, t.outcome)),
      h("td", { class: "num" }, t.reward === null ? "–" : fmt.num(t.reward)),
      h("td", { class: "num" }, String(t.calls)),
      h("td", { class: "num", title: `${t.prompt_tokens} prompt (${t.cached_tokens} cached) / ${t.completion_tokens} completion (${t.reasoning_tokens} thinking) tokens` }, `${fmt.count(t.prompt_tokens)} / ${fmt.count(t.completion_tokens)}`),
      h("td", { class: "when", title: fmt.at(t.ended_at) }, fmt.ago(t.ended_at / 1000, nowMs)),
    );
  }

  function filterLine(f: TrajectoryFilter, onClear: () => void): DomElement | null {
    if (f.global_step === null) return null;
    return h(
      "p",
      { class: "filter-line", id: "trajectories-filter", "data-global-step": f.global_step, "data-run": f.run ?? "" },
      h("span", { class: "pill" }, `global step ${f.global_step}${f.run === null ? "" : ` of run ${f.run}`}`),
      " picked on the reward chart ",
      h("button", { type: "button", class: "link", id: "trajectories-all", onclick: onClear }, "show every step"),
    );
  }

  function render(st: TrajectoryListState, nowMs: number, on: TrajectoryListHandlers): DomElement {
    const filter = filterLine(st.filter, on.onClearFilter);
    if (st.rows.length === 0) {
      const title = st.filter.global_step === null ? "No trajectory yet" : `No trajectory in global step ${st.filter.global_step}`;
      return h(
        "div",
        {},
        filter,
        empty("trajectories-empty", title, "A claim's LLM calls, reward and outcome are listed here once it ends, aborts or is reaped (with capture on, its calls are recorded by the relay)."),
      );
    }
    return h(
      "div",
      {},
      filter,
      h(
        "table",
        { id: "trajectories-table", "data-rows": st.rows.length },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            h("th", {}, "Episode"),
            h("th", {}, "Task"),
            h("th", { class: "num" }, "Step"),
            h("th", {}, "Outcome"),
            h("th", { class: "num" }, "Reward"),
            h("th", { class: "num" }, "LLM calls"),
            h("th", { class: "num" }, "Tokens in / out"),
            h("th", {}, "Ended"),
          ),
        ),
        h("tbody", {}, ...st.rows.map((t) => row(t, nowMs, st.open, on.onOpen))),
      ),
      h(
        "div",
        { class: "pager" },
        h("span", { id: "trajectories-range" }, `${fmt.count(st.rows.length)} newest${st.pinned ? " (held while older pages are shown)" : ""}, click one to open it`),
        st.pinned ? h("button", { type: "button", id: "trajectories-newest", onclick: on.onNewest }, "Newest") : null,
        h("button", { type: "button", id: "trajectories-more", disabled: !st.more, onclick: on.onMore }, "More"),
      ),
    );
  }

  return { render };
}
export type TrajectoryListView = ReturnType<typeof trajectoryListViewModule>;
