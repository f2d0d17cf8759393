/**
 * The reward chart: mean reward per global step as a line, mean ± std as a band, one marker per
 * step. Every marker carries its numbers as data attributes (data-step, data-mean, data-std,
 * data-count, data-min, data-max) so a person can hover them and a test can read them.
 */
import type { RewardHistoryEntry } from "../../protocol/swarm";
import type { Dom, DomElement } from "./dom";
import type { Format } from "./format";
import type { ChartGeometryModule } from "./chart-geometry";

export function chartModule(dom: Dom, fmt: Format, geometry: ChartGeometryModule) {
  const { s } = dom;
  const BOX = { width: 960, height: 300, left: 56, right: 20, top: 16, bottom: 40 };
  /** Above this many steps, markers would be a smear: only the line, band and last marker remain. */
  const MAX_MARKERS = 400;

  function marker(p: ReturnType<ChartGeometryModule["layout"]>["points"][number], last: boolean, onStep: ((step: number) => void) | null): DomElement {
    const off = p.offScale === null ? "" : ` (off the scale: drawn at the ${p.offScale === "above" ? "top" : "bottom"} edge)`;
    return s(
      "circle",
      {
        class: `point${last ? " last" : ""}${p.offScale === null ? "" : " off-scale"}${onStep === null ? "" : " clickable"}`,
        "data-off-scale": p.offScale ?? "",
        cx: p.x,
        cy: p.y,
        r: last ? 4.5 : 3,
        "data-step": p.global_step,
        "data-mean": p.mean_reward,
        "data-std": p.std_reward,
        "data-count": p.count,
        "data-min": p.min_reward,
        "data-max": p.max_reward,
        onclick: onStep === null ? null : () => onStep(p.global_step),
      },
      s(
        "title",
        {},
        `step ${p.global_step}: mean ${fmt.num(p.mean_reward)} ± ${fmt.num(p.std_reward)} (${p.count} episodes, min ${fmt.num(p.min_reward)}, max ${fmt.num(p.max_reward)})${off}${onStep === null ? "" : "; click to list its trajectories"}`,
      ),
    );
  }

  /** `onStep`, when given, makes each marker a button for its step. */
  function render(history: readonly RewardHistoryEntry[], onStep: ((step: number) => void) | null = null): DomElement {
    const g = geometry.layout(history, BOX);
    const { box } = g;
    const right = box.width - box.right;
    const bottom = box.height - box.bottom;
    const sampled = g.points.length > MAX_MARKERS;
    // Off-scale points keep their marker even when the rest are left out: it is what says so.
    const markers = sampled ? g.points.filter((p, i) => p.offScale !== null || i === g.points.length - 1) : g.points;
    return s(
      "svg",
      {
        id: "reward-chart",
        class: "chart",
        viewBox: `0 0 ${box.width} ${box.height}`,
        role: "img",
        "aria-label": `Mean reward per global step over ${g.points.length} steps`,
        "data-points": g.points.length,
        "data-sampled": String(sampled),
        "data-x-scale": g.xScale,
      },
      s(
        "g",
        { class: "grid" },
        ...g.yTicks.map((t) => s("line", { x1: box.left, x2: right, y1: t.at, y2: t.at })),
      ),
      s(
        "g",
        { class: "axis y" },
        ...g.yTicks.map((t) => s("text", { x: box.left - 8, y: t.at + 4, "text-anchor": "end" }, fmt.num(t.value))),
      ),
      s(
        "g",
        { class: "axis x" },
        s("line", { x1: box.left, x2: right, y1: bottom, y2: bottom }),
        // A label at the plot's right edge ends there, so that a long step number stays on the page.
        ...g.xTicks.map((t) => s("text", { x: t.at, y: bottom + 18, "text-anchor": t.at > right - 40 ? "end" : "middle" }, String(t.value))),
        s("text", { class: "label", x: right, y: box.height - 4, "text-anchor": "end" }, g.xScale === "ordinal" ? "global step (in order, not to scale)" : "global step"),
      ),
      s("path", { class: "band", d: g.bandPath, "data-role": "std-band" }),
      s("path", { class: "mean", d: g.meanPath, "data-role": "mean-line" }),
      s("g", { class: "points" }, ...markers.map((p) => marker(p, p === g.points[g.points.length - 1], onStep))),
    );
  }

  return { render };
}
export type ChartModule = ReturnType<typeof chartModule>;
