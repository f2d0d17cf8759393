/**
 * The top of an engine's page: its status and detail, the global step, the GPU host's agent,
 * and the episode and delivery counts as stacked bars. Ids and data attributes here are what
 * test-browser/ reads to compare the page with the API.
 */
import type { EngineOverview } from "../../protocol/agent";
import type { LedgerConfig } from "../../protocol/ledger";
import type { SyncConfig } from "../../protocol/sync";
import type { Dom, DomElement } from "./dom";
import type { Format } from "./format";
import type { BarsModule } from "./bars";

export function statusViewModule(dom: Dom, fmt: Format, bars: BarsModule) {
  const { h } = dom;

  /** Colour family of a status: running, changing, or stopped. */
  function tone(status: string): string {
    if (status === "ENGINE.ROLLING") return "good";
    if (status === "ENGINE.OFFLINE") return "off";
    return "busy";
  }

  function card(title: string, ...body: Array<DomElement | null>): DomElement {
    return h("section", { class: "card" }, h("h2", {}, title), ...body);
  }

  /** Refusals shown in the agent's card; the overview holds more. */
  const REFUSALS_SHOWN = 3;

  function agentCard(a: EngineOverview["agent"], refusals: EngineOverview["refusals"], relay: EngineOverview["relay"], nowMs: number): DomElement {
    const seen = a.last_seen === null ? "never called in" : `last seen ${fmt.ago(a.last_seen, nowMs)}`;
    return card(
      "GPU host agent",
      h(
        "p",
        { id: "agent", class: `agent ${a.connected ? "on" : "off"}`, "data-connected": String(a.connected) },
        h("span", { class: "dot" }),
        a.connected ? "connected" : "not connected",
      ),
      h("p", { class: "sub" }, [a.host, a.trainer_state ? `trainer ${a.trainer_state}` : null, seen].filter((x) => x !== null).join(" · ")),
      ...(a.rollout_workers ? [workersLine(a.rollout_workers)] : []),
      ...(refusals.length > 0 ? [refusalList(refusals, nowMs)] : []),
      relayLine(relay, nowMs),
      ...(a.ledger ? [hostLedgerLine(a.ledger)] : []),
    );
  }

  /**
   * The calls the gateway recorded, as the agent's last heartbeat counted them: stored, waiting
   * on the host, and in red those lost on the way (the ledger has no other trace of them).
   * Nothing until the gateway recorded a call.
   */
  function hostLedgerLine(l: NonNullable<EngineOverview["agent"]["ledger"]>): DomElement | null {
    const lost = { dropped: l.dropped_calls, refused: l.refused_calls, unrecorded: l.unrecorded_calls };
    const lostCount = lost.dropped + lost.refused + lost.unrecorded;
    if (l.sent_calls + l.duplicate_calls + l.queued_calls + lostCount === 0) return null;
    const kinds = Object.entries(lost).filter(([, n]) => n > 0);
    const text =
      `LLM calls recorded on the host: ${fmt.count(l.sent_calls + l.duplicate_calls)} stored` +
      (l.queued_calls === 0 ? "" : ` · ${fmt.count(l.queued_calls)} waiting (${fmt.bytes(l.queued_bytes)}${l.oldest_queued_ms === null ? "" : `, the oldest for ${fmt.ms(l.oldest_queued_ms)}`})`) +
      (lostCount === 0 ? "" : ` · ${fmt.count(lostCount)} lost (${kinds.map(([k, n]) => `${k} ${fmt.count(n)}`).join(", ")}: the agent's log says why)`);
    return h("p", { id: "host-ledger", class: lostCount > 0 ? "sub host-ledger lost" : "sub host-ledger", "data-queued": l.queued_calls, "data-lost": lostCount }, text);
  }

  /** A failed relayed call this recent is news: the line is red until the relay has gone this long without one. */
  const RELAY_FAILED_RECENTLY_MS = 300_000;

  /**
   * The LLM calls relayed through the agent's gateway, and those that failed as their clients got
   * them, by kind, with the latest's words: calls admitted alone read as calls served (null: none yet).
   */
  function relayLine(r: EngineOverview["relay"], nowMs: number): DomElement | null {
    const kinds = Object.entries(r.failures).sort((a, b) => b[1] - a[1]);
    if (r.calls === 0 && kinds.length === 0) return null;
    const failed = kinds.reduce((n, [, k]) => n + k, 0);
    const recent = r.last_failure !== null && nowMs - r.last_failure.at < RELAY_FAILED_RECENTLY_MS;
    const text =
      `LLM calls relayed: ${fmt.count(r.calls)}` +
      (failed === 0 ? "" : ` · ${fmt.count(failed)} failed (${kinds.map(([k, n]) => `${k} × ${fmt.count(n)}`).join(", ")})`) +
      (r.last_failure === null ? "" : `; the latest ${fmt.ago(r.last_failure.at / 1000, nowMs)}: ${r.last_failure.message}`);
    return h("p", { id: "relay-calls", class: recent ? "sub relay failing" : "sub relay", "data-calls": r.calls, "data-failed": failed, "data-failing": String(recent) }, text);
  }

  /** Commands the agent refused or failed, newest first, in its words: otherwise only its own log would say. */
  function refusalList(refusals: EngineOverview["refusals"], nowMs: number): DomElement {
    return h(
      "ul",
      { id: "agent-refusals", class: "sub refusals", "data-count": refusals.length },
      ...refusals
        .slice(0, REFUSALS_SHOWN)
        .map((r) => h("li", { "data-seq": r.seq, "data-kind": r.kind }, `refused ${r.kind} (command ${r.seq}, ${fmt.ago(r.at, nowMs)}): ${r.detail}`)),
    );
  }

  /** Rollout workers that ended on their own stop feeding the buffer: said in red, with the agent's words. */
  function workersLine(w: NonNullable<EngineOverview["agent"]["rollout_workers"]>): DomElement {
    const about = [w.pid !== null ? `pid ${w.pid}` : null, w.job_session ? `job ${w.job_session}` : null].filter((x) => x !== null);
    const running = `rollout workers running${about.length > 0 ? ` (${about.join(", ")})` : ""}`;
    // A state a newer agent added is said as it came (as text), and adds no class of its choosing.
    const text = w.state === "exited" ? w.detail : w.state === "running" ? running : `rollout workers ${w.state}${w.detail ? `: ${w.detail}` : ""}`;
    return h("p", { id: "rollout-workers", class: w.state === "exited" || w.state === "running" ? `sub workers ${w.state}` : "sub workers", "data-state": w.state }, text);
  }

  /** What the relay records of each LLM call (the trajectory ledger's capture) and for how long. */
  function captureLine(l: LedgerConfig): DomElement {
    const what = l.capture === "off" ? "LLM calls not recorded (capture off)" : `LLM calls recorded: ${l.capture === "tokens" ? "messages and token ids" : "messages"}, kept ${l.retention_days} day${l.retention_days === 1 ? "" : "s"}`;
    return h("p", { id: "ledger-capture", class: `sub capture ${l.capture}`, "data-capture": l.capture, "data-retention-days": l.retention_days }, what);
  }

  /**
   * Whether Atropos's trajectory API has been used: a trainer registered or groups came. One
   * test for its card and for the page's "No activity yet", so the page never shows the card
   * and calls the engine quiet beside it.
   */
  function atroposInUse(a: EngineOverview["atropos"]): boolean {
    return a.registered || a.stored_groups > 0;
  }

  /**
   * Atropos's trajectory API, once in use: the step, what is queued, and in red what keeps
   * batches from being cut (its stalls), which Atropos's run-api never says.
   */
  function atroposCard(a: EngineOverview["atropos"]): DomElement | null {
    if (!atroposInUse(a)) return null;
    const held = `${a.stored_groups} of ${a.max_groups} held (${fmt.bytes(a.stored_bytes)} of ${fmt.bytes(a.max_stored_bytes)})`;
    return card(
      "Atropos",
      h("p", { id: "atropos-queued", class: "big", "data-value": a.queued_groups }, String(a.queued_groups)),
      h(
        "p",
        { id: "atropos-held", class: "sub", "data-stored-bytes": a.stored_bytes, "data-max-stored-bytes": a.max_stored_bytes },
        `groups queued · step ${a.current_step} · batch ${a.batch_size} · ${a.environments} env${a.environments === 1 ? "" : "s"} · ${held}`,
      ),
      ...(a.stalls.length === 0
        ? []
        : [h("ul", { id: "atropos-stalls", class: "sub refusals", "data-count": a.stalls.length }, ...a.stalls.map((x) => h("li", { "data-kind": x.kind, "data-groups": x.groups }, x.detail)))]),
    );
  }

  /**
   * How full the engine's store is; in red once writes that add data are refused (storage_full),
   * which otherwise shows only as 503s to the trainer and its clients.
   */
  function storageLine(st: EngineOverview["storage"]): DomElement {
    const over = st.used_bytes > st.high_water_bytes;
    return h(
      "p",
      { id: "engine-storage", class: over ? "sub full" : "sub", "data-used-bytes": st.used_bytes, "data-high-water-bytes": st.high_water_bytes, title: `Writes that add data are refused above ${fmt.bytes(st.high_water_bytes)}; a Durable Object holds ${fmt.bytes(st.max_bytes)}` },
      over ? `store full: ${fmt.bytes(st.used_bytes)} held, above ${fmt.bytes(st.high_water_bytes)}: new data is refused` : `store ${fmt.bytes(st.used_bytes)} of ${fmt.bytes(st.high_water_bytes)}`,
    );
  }

  /** A boot that takes longer than this is shown as stuck: the agent or the trainer is not starting. */
  const BOOTING_LONG_SECONDS = 600;

  /**
   * How long the engine has held its status, in red once a sync outlasts max_sync_seconds (from
   * then on its kept claims are reaped) or a boot ten minutes: a one-second sync and a one-hour
   * hang otherwise show the same badge. `sync` is null when its read failed: no sync is called long.
   */
  function statusSince(ov: EngineOverview, sync: SyncConfig | null, nowMs: number): DomElement | null {
    if (ov.engine_status_since === null) return null;
    const seconds = (nowMs - ov.engine_status_since) / 1000;
    const limit = ov.engine_status === "ENGINE.BOOTING" ? BOOTING_LONG_SECONDS : ov.engine_status === "ENGINE.WEIGHT_SYNCING" ? (sync?.max_sync_seconds ?? null) : null;
    const long = limit !== null && seconds > limit;
    return h(
      "span",
      { id: "engine-status-since", class: long ? "since long" : "since", "data-since": ov.engine_status_since, "data-long": String(long), title: `since ${fmt.at(ov.engine_status_since)}` },
      `for ${fmt.duration(seconds)}`,
    );
  }

  /** An outbox row older than this, or a failed flush, means D1 is not taking the engine's records. */
  const OUTBOX_STUCK_MS = 60_000;

  /**
   * The records waiting for D1 (trajectories, rewards, buffer steps); in red, with D1's answer,
   * once they wait longer than a minute or a flush failed: a D1 outage otherwise shows only as
   * history that stopped growing.
   */
  function outboxLine(o: EngineOverview["outbox"], nowMs: number): DomElement {
    const waited = o.oldest_at === null ? null : nowMs - o.oldest_at;
    const stuck = o.last_error !== null || (waited !== null && waited > OUTBOX_STUCK_MS);
    const backlog = o.rows === 0 ? "nothing waiting for D1" : `${fmt.count(o.rows)} record${o.rows === 1 ? "" : "s"} waiting for D1${waited === null ? "" : ` for ${fmt.duration(waited / 1000)}`}`;
    const failed = o.last_error === null ? "" : `: D1 failed${o.last_error_at === null ? "" : ` ${fmt.ago(o.last_error_at / 1000, nowMs)}`}: ${o.last_error}`;
    return h(
      "p",
      { id: "engine-outbox", class: stuck ? "sub outbox stuck" : "sub outbox", "data-rows": o.rows, "data-oldest-at": o.oldest_at ?? "", "data-last-error": o.last_error ?? "", "data-stuck": String(stuck) },
      backlog + failed,
    );
  }

  /** `ledger` and `sync` are null when their read failed: what they would say is left out rather than guessed. */
  function render(ov: EngineOverview, ledger: LedgerConfig | null, sync: SyncConfig | null, nowMs: number): DomElement {
    const e = ov.episodes;
    const d = ov.deliveries;
    return h(
      "div",
      { class: "overview" },
      h(
        "div",
        { class: "cards" },
        card(
          "Status",
          h("p", { id: "engine-status", class: `badge ${tone(ov.engine_status)}`, "data-status": ov.engine_status }, fmt.status(ov.engine_status)),
          statusSince(ov, sync, nowMs),
          h("p", { id: "engine-detail", class: "sub" }, ov.engine_status_detail ?? ""),
          ledger === null ? null : captureLine(ledger),
          storageLine(ov.storage),
          outboxLine(ov.outbox, nowMs),
        ),
        card(
          "Global step",
          h("p", { id: "global-step", class: "big", "data-value": ov.global_step ?? "" }, ov.global_step === null ? "–" : String(ov.global_step)),
          h("p", { class: "sub" }, ov.global_step === null ? "the trainer has not reported a step" : "as last reported by the trainer"),
        ),
        agentCard(ov.agent, ov.refusals, ov.relay, nowMs),
        atroposCard(ov.atropos),
      ),
      h(
        "div",
        { class: "cards two" },
        card(
          "Episodes",
          bars.stacked("episode-counts", [
            { key: "registered", label: "waiting to be claimed", value: e.registered },
            { key: "claimed", label: "running", value: e.claimed },
            { key: "resetting", label: "resetting", value: e.resetting },
          ]),
        ),
        card(
          "Results to the trainer",
          bars.stacked("delivery-counts", [
            { key: "delivered", label: "delivered", value: d.delivered },
            { key: "pending", label: "pending delivery", value: d.pending },
            { key: "undeliverable", label: "undeliverable", value: d.undeliverable },
          ]),
        ),
      ),
    );
  }

  return { render, tone, atroposInUse };
}
export type StatusView = ReturnType<typeof statusViewModule>;
