/**
 * An engine's figures in Prometheus's text exposition format (version 0.0.4), for
 * `GET /e/<engine>/metrics`: what the overview and the buffer's health say, as gauges and
 * counters a scraper can keep and alert on (docs/operations.md, "Monitoring"). Times are
 * timestamps in seconds, as Prometheus's own are, so that an alert says `time() - x > 300`.
 * Every sample carries the engine's name: one Prometheus scrapes many engines under one job.
 */
import type { EngineOverview } from "../protocol/agent";
import type { HealthResponse } from "../protocol/buffer";
import { RELAY_OWN_FAILURE_KINDS } from "../protocol/relay";
import { ENGINE_STATUSES } from "../protocol/status";

/** The content type of the text format, as scrapers ask for it. */
export const EXPOSITION_TYPE = "text/plain; version=0.0.4; charset=utf-8";

type Labels = Record<string, string>;
type Family = { name: string; type: "gauge" | "counter"; help: string; samples: [Labels, number][] };

/** A label value as the format quotes it: backslash, double quote and line feed escaped. */
const quoted = (v: string): string => `"${v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`;

/** HELP text escapes backslash and line feed only. */
const helpText = (v: string): string => v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");

/** A value as the format spells it: Go's float syntax, with +Inf, -Inf and NaN. */
const sampleValue = (v: number): string => (Number.isNaN(v) ? "NaN" : v === Infinity ? "+Inf" : v === -Infinity ? "-Inf" : String(v));

function render(families: Family[], engine: string): string {
  const lines: string[] = [];
  for (const f of families) {
    if (f.samples.length === 0) continue;
    lines.push(`# HELP ${f.name} ${helpText(f.help)}`, `# TYPE ${f.name} ${f.type}`);
    for (const [labels, value] of f.samples) {
      const all = Object.entries({ engine, ...labels }).map(([k, v]) => `${k}=${quoted(v)}`);
      lines.push(`${f.name}{${all.join(",")}} ${sampleValue(value)}`);
    }
  }
  return lines.join("\n") + "\n";
}

const gauge = (name: string, help: string, value: number | null, labels: Labels = {}): Family => ({
  name,
  type: "gauge",
  help,
  samples: value === null ? [] : [[labels, value]],
});
const counter = (name: string, help: string, value: number): Family => ({ name, type: "counter", help, samples: [[{}, value]] });
const byLabel = (name: string, type: Family["type"], help: string, label: string, values: Record<string, number>): Family => ({
  name,
  type,
  help,
  samples: Object.entries(values).map(([k, v]) => [{ [label]: k }, v]),
});
const seconds = (ms: number | null): number | null => (ms === null ? null : ms / 1000);

/**
 * The relay's failure kinds are "<status> <code>": a label each, so that alerts can sum 5xx by
 * code. The exchange's own are there from 0 (a series that first shows above 0 hides its first
 * burst from rate()); the upstream's own codes show when they first come.
 */
function relayFailures(failures: Record<string, number>): Family {
  const all: Record<string, number> = { ...Object.fromEntries(RELAY_OWN_FAILURE_KINDS.map((k) => [k, 0])), ...failures };
  return {
    name: "rx_relay_failures_total",
    type: "counter",
    help: "Relayed LLM calls that failed as their clients got them, since the engine's object started, by status and error code.",
    samples: Object.entries(all).map(([kind, n]) => {
      const space = kind.indexOf(" ");
      return [space < 0 ? { status: kind, code: "" } : { status: kind.slice(0, space), code: kind.slice(space + 1) }, n];
    }),
  };
}

/**
 * The agent's queue of recorded calls and what became of them, as of its last heartbeat; absent
 * when it reported none. Its counts start over with the agent, as a process's counters do.
 */
function agentLedger(l: EngineOverview["agent"]["ledger"]): Family[] {
  if (l === null) return [];
  return [
    gauge("rx_agent_ledger_queued_calls", "Calls the agent recorded and has not yet stored in the ledger.", l.queued_calls),
    gauge("rx_agent_ledger_queued_bytes", "Bytes of those calls' records and media.", l.queued_bytes),
    gauge("rx_agent_ledger_oldest_queued_seconds", "How long the oldest of them had waited at the agent's last heartbeat (absent when none waits).", l.oldest_queued_ms === null ? null : l.oldest_queued_ms / 1000),
    byLabel("rx_agent_ledger_calls_total", "counter", "Calls the agent recorded, since it started, by what became of them: stored (sent, or duplicate when the exchange had them), or lost (dropped from a full queue, refused, unrecorded).", "outcome", {
      sent: l.sent_calls,
      duplicate: l.duplicate_calls,
      dropped: l.dropped_calls,
      refused: l.refused_calls,
      unrecorded: l.unrecorded_calls,
    }),
  ];
}

/** 1 for `current`, 0 for every other status AgentJet knows (and `current` kept, should it be one no list names). */
function engineStatuses(current: string): Record<string, number> {
  const all: Record<string, number> = Object.fromEntries(ENGINE_STATUSES.map((s) => [s, 0]));
  all[current] = 1;
  return all;
}

export function engineMetrics(o: EngineOverview, h: HealthResponse): string {
  const b = h.buffer;
  const a = o.atropos;
  const stalls: Record<string, number> = {};
  for (const s of a.stalls) stalls[s.kind] = (stalls[s.kind] ?? 0) + s.groups;
  return render(
    [
      // Every status, 1 for the one it is in (a state set): a status's series drops to 0 rather than vanishing.
      byLabel("rx_engine_status", "gauge", "The engine's status: 1 for the status it is in, 0 for the others.", "status", engineStatuses(o.engine_status)),
      gauge("rx_engine_status_since_timestamp_seconds", "When the engine entered its status.", seconds(o.engine_status_since)),
      gauge("rx_global_step", "The trainer's global step.", o.global_step),
      byLabel("rx_episodes", "gauge", "Live episodes by state.", "state", o.episodes),
      byLabel("rx_deliveries", "gauge", "Ended episodes' results by delivery to the trainer's runner.", "state", o.deliveries),
      gauge("rx_pending_commands", "Commands queued for the GPU host's agent and not yet acknowledged.", o.pending_commands),
      gauge("rx_outbox_rows", "Rows written by the engine and waiting for D1.", o.outbox.rows),
      gauge("rx_outbox_oldest_row_timestamp_seconds", "When the oldest row waiting for D1 was written (absent when none waits).", seconds(o.outbox.oldest_at)),
      gauge("rx_outbox_last_error_timestamp_seconds", "When D1 last refused a row still waiting (absent when none failed).", seconds(o.outbox.last_error_at)),
      gauge("rx_agent_connected", "1 while the GPU host's agent calls in.", o.agent.connected ? 1 : 0),
      gauge("rx_agent_last_seen_timestamp_seconds", "The agent's last heartbeat.", o.agent.last_seen),
      ...agentLedger(o.agent.ledger),
      counter("rx_relay_calls_total", "Relayed LLM calls admitted since the engine's object started.", o.relay.calls),
      counter("rx_relay_engine_requests_total", "The relay's requests to the engine that carried those calls.", o.relay.engine_requests),
      relayFailures(o.relay.failures),
      gauge("rx_ledger_claims_to_gather", "Claims whose recorded calls wait to be gathered into one object each, live ones included.", o.ledger.claims_to_gather),
      counter("rx_ledger_engine_requests_total", "The ledger's requests to the engine, one per batch of calls recorded, since the engine's object started.", o.ledger.engine_requests),
      gauge("rx_storage_used_bytes", "Bytes of the engine's store in use.", o.storage.used_bytes),
      gauge("rx_storage_high_water_bytes", "Above this, requests that add data are refused 503 storage_full.", o.storage.high_water_bytes),
      gauge("rx_storage_max_bytes", "The most the engine's store holds.", o.storage.max_bytes),
      byLabel("rx_buffer_groups", "gauge", "The rollout buffer's groups waiting: filling (pending) or ready to pull.", "state", { pending: b.pending_groups, ready: b.ready_groups }),
      gauge("rx_buffer_pending_steps", "Step rows of groups still filling.", b.pending_steps),
      gauge("rx_buffer_stored_bytes", "Bytes of the buffer's rows held, kept pulls included.", b.stored_bytes),
      gauge("rx_buffer_max_stored_bytes", "The bound on the bytes of rows waiting to be pulled.", b.config.max_stored_bytes),
      byLabel("rx_buffer_groups_decided_total", "counter", "Groups the buffer delivered, or dropped (at their TTL, as stale, or discarded by a restart).", "outcome", {
        delivered: b.delivered_groups,
        dropped: b.dropped_groups,
      }),
      // Apart: a stale group is also among the delivered (flagged) or the dropped.
      counter("rx_buffer_stale_groups_total", "Groups found stale when pulled, delivered flagged or dropped by the staleness policy (also counted in rx_buffer_groups_decided_total).", b.stale_groups),
      byLabel("rx_buffer_partial_groups_total", "counter", "Groups decided at their TTL short of group_size usable sessions.", "outcome", {
        delivered: b.partial_groups_delivered,
        dropped: b.partial_groups_dropped,
      }),
      byLabel("rx_buffer_rows_refused_total", "counter", "Step rows not stored: arriving after their group was decided (late) or again (duplicate).", "reason", {
        late: b.late_rows_ignored,
        duplicate: b.duplicate_rows,
      }),
      counter("rx_buffer_failed_sessions_total", "Sessions marked failed, aborted or reaped claims included.", b.failed_sessions),
      byLabel("rx_buffer_refusals_total", "counter", "Work the buffer held back: paced claims and sessions, and batches refused buffer_full.", "reason", {
        paced: b.paced_refusals,
        buffer_full: b.full_refusals,
      }),
      gauge("rx_atropos_registered", "1 once a trainer registered a run with the Atropos API.", a.registered ? 1 : 0),
      gauge("rx_atropos_current_step", "The Atropos trainer's step.", a.current_step),
      gauge("rx_atropos_queued_groups", "Scored groups queued for the Atropos trainer.", a.queued_groups),
      gauge("rx_atropos_stored_groups", "Groups held: queued, buffered, set aside or cut.", a.stored_groups),
      gauge("rx_atropos_max_groups", "The most groups held.", a.max_groups),
      gauge("rx_atropos_stored_bytes", "Bytes of the groups held.", a.stored_bytes),
      gauge("rx_atropos_max_stored_bytes", "The most bytes of groups held.", a.max_stored_bytes),
      gauge("rx_atropos_environments", "Environments registered with the Atropos API.", a.environments),
      byLabel("rx_atropos_stalled_groups", "gauge", "Groups kept from being cut into batches, by why.", "kind", stalls),
    ],
    o.engine,
  );
}
