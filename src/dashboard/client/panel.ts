/**
 * Panels that draw their own read (the rollout buffer, the training runs). They belong to
 * features a token may be kept from, or whose store (D1) can fail on its own, so a failed read
 * marks only its panel: the rest of the page and the panel's last picture stay.
 */
import type { Problem, Result } from "./api";
import type { Dom, DomElement } from "./dom";
import type { ActivityView } from "./activity-view";

export function panelModule(dom: Dom, empty: ActivityView["empty"]) {
  const { byId } = dom;

  const said = (p: Problem): string => (p.status === 0 ? p.detail : `${p.status} ${p.error}${p.detail ? `: ${p.detail}` : ""}`);

  /**
   * Draws `id` from `r`. A refused token replaces the panel with a message saying so (refreshing
   * will not change that); any other failure keeps the last picture under a note (`#<id>-problem`),
   * as the next refresh may succeed.
   */
  function draw<T>(id: string, what: string, r: Result<T>, render: (value: T) => DomElement): void {
    const note = byId(`${id}-problem`);
    note.hidden = r.ok || r.problem.status === 401 || r.problem.status === 403;
    note.setAttribute("data-problem", r.ok ? "" : String(r.problem.status));
    if (r.ok) {
      byId(id).replaceChildren(render(r.value));
    } else if (note.hidden) {
      byId(id).replaceChildren(empty(`${id}-forbidden`, `This token may not read ${what}`, `The exchange answered ${said(r.problem)}. A token of a role that may read ${what} is needed.`));
    } else {
      const shown = byId(id).childElementCount > 0 ? "Showing the last data" : "Nothing read yet";
      note.textContent = `Could not read ${what}: ${said(r.problem)}. ${shown}; retrying with the next refresh.`;
    }
  }

  /** Empties `id` and its note: another engine is shown, and its last picture is not this one's. */
  function clear(id: string): void {
    byId(id).replaceChildren();
    byId(`${id}-problem`).hidden = true;
  }

  return { draw, clear };
}
export type Panel = ReturnType<typeof panelModule>;
