/**
 * Small charts made of bars: a stacked bar for counts that add up (episodes by state,
 * deliveries by outcome), a ranked bar list (finished episodes per task) and an idle meter
 * (how much of a claim's timeout its client has used).
 */
import type { Dom, DomElement } from "./dom";
import type { Format } from "./format";

export type Segment = { key: string; label: string; value: number };

export function barsModule(dom: Dom, fmt: Format) {
  const { h, s } = dom;

  /** One bar split by value, with a legend that holds the exact numbers (data-count, data-value). */
  function stacked(id: string, segments: readonly Segment[]): DomElement {
    const total = segments.reduce((a, x) => a + x.value, 0);
    let at = 0;
    const rects = segments.map((seg) => {
      const w = total === 0 ? 0 : (seg.value / total) * 100;
      const rect = s("rect", { class: `seg ${seg.key}`, x: at, y: 0, width: w, height: 10 }, s("title", {}, `${seg.label}: ${seg.value}`));
      at += w;
      return rect;
    });
    return h(
      "div",
      { class: "stacked", id },
      s(
        "svg",
        { class: total === 0 ? "stack zero" : "stack", viewBox: "0 0 100 10", preserveAspectRatio: "none", "aria-hidden": true },
        s("rect", { class: "track", x: 0, y: 0, width: 100, height: 10 }),
        ...rects,
      ),
      h(
        "ul",
        { class: "legend" },
        ...segments.map((seg) =>
          h(
            "li",
            { "data-count": seg.key, "data-value": seg.value },
            h("span", { class: `swatch ${seg.key}` }),
            h("span", { class: "legend-label" }, seg.label),
            h("strong", {}, fmt.count(seg.value)),
          ),
        ),
      ),
    );
  }

  /** Rows of label + bar + number, longest first; at most `limit` rows, then "and N more". */
  function ranked(rows: readonly { label: string; value: number; title?: string }[], limit: number): DomElement {
    const sorted = [...rows].sort((a, b) => b.value - a.value || a.label.localeCompare(b.label));
    // All zero: bars of no length rather than 0 / 0.
    const max = Math.max(sorted[0]?.value ?? 1, Number.MIN_VALUE);
    const shown = sorted.slice(0, limit);
    return h(
      "div",
      { class: "ranked" },
      ...shown.map((r) =>
        h(
          "div",
          { class: "ranked-row", "data-label": r.label, "data-value": r.value, title: r.title ?? r.label },
          h("span", { class: "ranked-label" }, r.label),
          s("svg", { class: "ranked-bar", viewBox: "0 0 100 8", preserveAspectRatio: "none", "aria-hidden": true }, s("rect", { x: 0, y: 0, width: (r.value / max) * 100, height: 8 })),
          h("span", { class: "ranked-value" }, fmt.count(r.value)),
        ),
      ),
      sorted.length > limit ? h("p", { class: "more" }, `and ${sorted.length - limit} more`) : null,
    );
  }

  /** Share of the timeout used: calm below half, warning above three quarters. */
  function idleMeter(idle: number, timeout: number): DomElement {
    const f = timeout > 0 ? Math.min(1, idle / timeout) : 0;
    const level = f > 0.75 ? "hot" : f > 0.5 ? "warm" : "calm";
    return s(
      "svg",
      { class: `meter ${level}`, viewBox: "0 0 100 6", preserveAspectRatio: "none", "aria-hidden": true },
      s("rect", { class: "track", x: 0, y: 0, width: 100, height: 6 }),
      s("rect", { class: "fill", x: 0, y: 0, width: f * 100, height: 6 }),
    );
  }

  return { stacked, ranked, idleMeter };
}
export type BarsModule = ReturnType<typeof barsModule>;
