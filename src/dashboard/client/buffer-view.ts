/**
 * The engine's rollout buffer (slime / AIEvoBox trainers): its groups by state as one stacked
 * bar, the row counts that tell of trouble upstream, and the settings that decide what is
 * dropped. /health reports counters only, so the panel costs the same for ten groups or a
 * million and never lists them. Data attributes carry the exact numbers for test-browser/.
 */
import type { PartialGroupsPolicy, StalenessPolicy } from "../../protocol/buffer";
import type { Health } from "./api";
import type { Dom, DomElement } from "./dom";
import type { Format } from "./format";
import type { BarsModule } from "./bars";
import type { ActivityView } from "./activity-view";

type Buffer = Health["buffer"];

export function bufferViewModule(dom: Dom, fmt: Format, bars: BarsModule, empty: ActivityView["empty"]) {
  const { h } = dom;

  /** Whether anything was ever posted or pulled; settings alone do not count. */
  function inUse(b: Buffer): boolean {
    return b.pending_groups + b.ready_groups + b.delivered_groups + b.dropped_groups + b.pending_steps + b.late_rows_ignored + b.duplicate_rows > 0;
  }

  /** One setting as a phrase, its raw value in data-value (JSON, so null survives). */
  const setting = (key: string, value: unknown, text: string): DomElement => h("span", { "data-config": key, "data-value": JSON.stringify(value) }, text);

  function settings(c: Buffer["config"]): DomElement {
    const parts = [
      setting("group_size", c.group_size, `group size ${c.group_size}`),
      setting("ttl_seconds", c.ttl_seconds, c.ttl_seconds === 0 ? "incomplete groups kept forever" : `incomplete groups dropped after ${fmt.duration(c.ttl_seconds)} without rows`),
      setting("max_staleness", c.max_staleness, c.max_staleness === null ? "no staleness check" : `stale beyond ${c.max_staleness} weight versions`),
      setting("staleness_policy", c.staleness_policy, STALENESS_TEXT[c.staleness_policy] ?? `staleness policy ${c.staleness_policy}`),
      setting("rollouts_per_version", c.rollouts_per_version, c.rollouts_per_version === null ? "trainer's batch measured" : `trainer takes ${c.rollouts_per_version} per version`),
      setting("partial_groups", c.partial_groups, PARTIAL_TEXT[c.partial_groups] ?? `partial groups ${c.partial_groups}`),
      setting("max_message_bytes", c.max_message_bytes, `rows up to ${fmt.bytes(c.max_message_bytes)}`),
      setting("max_stored_bytes", c.max_stored_bytes, `no new group past ${fmt.bytes(c.max_stored_bytes)} of rows waiting to be pulled`),
      setting("d1_retention_days", c.d1_retention_days, `steps kept in D1 for ${c.d1_retention_days} ${c.d1_retention_days === 1 ? "day" : "days"}`),
    ];
    return h("p", { class: "sub settings", id: "buffer-config" }, ...parts.flatMap((p, i) => (i === 0 ? [p] : [" · ", p])));
  }

  // Every known policy has its words; one the page does not know is named as it came.
  const STALENESS_TEXT: Partial<Record<string, string>> = {
    flag: "stale groups delivered, flagged",
    drop: "stale groups dropped",
    pace: "new work held back instead of dropping stale groups",
  } satisfies Record<StalenessPolicy, string>;
  const PARTIAL_TEXT: Partial<Record<string, string>> = {
    deliver: "short groups delivered at their TTL, masked",
    drop: "short groups dropped at their TTL",
  } satisfies Record<PartialGroupsPolicy, string>;

  /** The last pull's most lagging groups: how far off-policy each was when consumed, and how long it waited. */
  function lastPull(p: Buffer["last_pull"]): DomElement | null {
    if (p === null) return null;
    const version = p.consumer_weight_version === null ? "no weight version reported" : `trainer at weight version ${p.consumer_weight_version}`;
    return h(
      "div",
      { id: "buffer-last-pull", "data-cursor": p.cursor, "data-groups": p.group_count },
      h("p", { class: "sub" }, `Last pull (${fmt.count(p.group_count)} groups, ${version}), the most lagging first`),
      h(
        "table",
        {},
        h(
          "thead",
          {},
          h("tr", {}, h("th", {}, "Group"), h("th", { class: "num" }, "Lag (versions)"), h("th", { class: "num" }, "Oldest version"), h("th", { class: "num" }, "Queued"), h("th", { class: "num" }, "Usable / failed")),
        ),
        h(
          "tbody",
          {},
          ...p.groups.map((g) =>
            h(
              "tr",
              { "data-group": g.group_id, "data-lag": JSON.stringify(g.lag_versions), "data-oldest": JSON.stringify(g.oldest_weight_version), "data-queued": g.queued_seconds },
              h("td", { title: g.group_id, class: "mono" }, fmt.shortId(g.group_id) + (g.partial ? " (partial)" : "")),
              h("td", { class: "num" }, g.lag_versions === null ? "–" : String(g.lag_versions)),
              h("td", { class: "num" }, g.oldest_weight_version === null ? "–" : String(g.oldest_weight_version)),
              h("td", { class: "num" }, fmt.duration(g.queued_seconds)),
              h("td", { class: "num" }, `${g.usable_sessions} / ${g.failed_sessions}`),
            ),
          ),
        ),
      ),
    );
  }

  function figure(key: keyof Buffer, label: string, value: number, title: string): DomElement {
    return h("div", { "data-stat": key, "data-value": value, title }, h("dt", {}, label), h("dd", {}, fmt.count(value)));
  }

  function render(health: Health): DomElement {
    const b = health.buffer;
    const last = lastPull(b.last_pull);
    const pulled = last === null ? [] : [last];
    if (!inUse(b)) {
      return h(
        "div",
        {},
        empty("buffer-empty", "Rollout buffer not in use", "Groups show up here once rollout workers post step rows to /steps; the trainer pulls the complete ones with /get_rollout_data."),
        settings(b.config),
      );
    }
    return h(
      "div",
      { id: "buffer-summary" },
      bars.stacked("buffer-groups", [
        { key: "pending", label: "waiting for sessions", value: b.pending_groups },
        { key: "ready", label: "ready to pull", value: b.ready_groups },
        { key: "delivered", label: "delivered", value: b.delivered_groups },
        { key: "dropped", label: "dropped", value: b.dropped_groups },
      ]),
      h(
        "dl",
        { class: "figures" },
        figure("pending_steps", "rows in open groups", b.pending_steps, "Step rows of groups still waiting for sessions to complete"),
        figure("stale_groups", "stale groups", b.stale_groups, "Groups that lagged the trainer's weight version by more than max_staleness when pulled or dropped"),
        figure("late_rows_ignored", "late rows ignored", b.late_rows_ignored, "New rows for groups already delivered or dropped"),
        figure("duplicate_rows", "duplicate rows", b.duplicate_rows, "Rows sent again (same session and step): stored once"),
        figure("failed_sessions", "failed sessions", b.failed_sessions, "Sessions marked failed_infra (aborted or reaped AgentJet claims too): kept, never counted toward a group"),
        figure("partial_groups_delivered", "partial groups delivered", b.partial_groups_delivered, "Groups delivered at their TTL short of group_size usable sessions, with a usable mask"),
        figure("partial_groups_dropped", "partial groups dropped", b.partial_groups_dropped, "Groups dropped at their TTL short of group_size usable sessions"),
        figure("paced_refusals", "held back by pace", b.paced_refusals, "Claims and new groups held back so that what is under way is not consumed too stale"),
        h("div", { "data-stat": "stored_bytes", "data-value": b.stored_bytes, title: "Bytes of the step rows the buffer holds, the last pulls' kept for re-reading included; max_stored_bytes bounds those still waiting to be pulled" }, h("dt", {}, "rows held"), h("dd", {}, fmt.bytes(b.stored_bytes))),
        figure("full_refusals", "refused as full", b.full_refusals, "Batches opening a new group refused because rows waiting to be pulled filled max_stored_bytes (503 buffer_full)"),
      ),
      ...pulled,
      settings(b.config),
    );
  }

  return { render, inUse };
}
export type BufferView = ReturnType<typeof bufferViewModule>;
