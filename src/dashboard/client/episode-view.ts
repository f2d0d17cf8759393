/**
 * One claim of an episode as the ledger holds it: its outcome and reward, a timeline (the first
 * call admitted, each call with its latency, time to first byte, tokens, status and weight
 * version, then how the claim ended), and one call's whole conversation with its answer (the
 * last call's unless the reader picks another). A turn whose history the client rewrote, or
 * whose prompt tokens drifted, is marked where it happened: the ledger does not splice over it.
 */
import type { Trajectory } from "../../protocol/ledger";
import type { Dom, DomElement } from "./dom";
import type { Format } from "./format";
import type { ConversationView, MediaLoader } from "./conversation-view";
import type { DeltaMessages } from "./delta-messages";

type Call = Trajectory["calls"][number];
export type EpisodeHandlers = { onShowCall: (index: number) => void; loadMedia: MediaLoader };

export function episodeViewModule(dom: Dom, fmt: Format, conversation: ConversationView, delta: DeltaMessages) {
  const { h, s } = dom;
  const BAR = { width: 160, height: 10 };

  const outcomeTone = (o: Trajectory["outcome"]): string => (o === "ended" ? "good" : o === "reaped" ? "bad" : o === "aborted" ? "busy" : "");

  /** In and out, with the prefix cache's share of the prompt and the thinking's of the completion when the model said them. */
  function tokensText(u: { prompt_tokens: number; completion_tokens: number; cached_tokens: number | null; reasoning_tokens: number | null }): string {
    const part = (n: number, what: string, of: number | null): string => (of ? `${fmt.count(n)} ${what} (${fmt.count(of)} ${what === "in" ? "cached" : "thinking"})` : `${fmt.count(n)} ${what}`);
    return `${part(u.prompt_tokens, "in", u.cached_tokens)} · ${part(u.completion_tokens, "out", u.reasoning_tokens)}`;
  }

  function fact(label: string, value: DomElement | string, attrs: Record<string, string | number> = {}): DomElement {
    return h("div", attrs, h("dt", {}, label), h("dd", {}, value));
  }

  function facts(t: Trajectory): DomElement {
    const reward = t.reward === null ? "none" : fmt.num(t.reward);
    return h(
      "dl",
      { class: "figures episode-facts" },
      fact("Outcome", h("span", { class: `pill ${outcomeTone(t.outcome)}` }, t.outcome ?? "running"), { "data-fact": "outcome" }),
      fact("Reward", t.is_success === null ? reward : `${reward} · ${t.is_success ? "success" : "no success"}`, { "data-fact": "reward" }),
      fact("Task", t.task_id === "" ? "–" : t.task_id, { "data-fact": "task", title: t.task_id }),
      fact("Global step", t.global_step === null ? "–" : `${t.global_step} (run ${t.run})`, { "data-fact": "global-step" }),
      fact("Client", h("span", { class: "mono", title: t.client_uuid }, fmt.shortId(t.client_uuid)), { "data-fact": "client" }),
      fact("Claim", `fence ${t.fence} · ${t.episode_type}`, { "data-fact": "fence" }),
      fact("LLM calls", String(t.calls.length), { "data-fact": "calls" }),
      fact("Tokens", tokensText(t), { "data-fact": "tokens" }),
    );
  }

  /** Where a call sat among the claim's calls: queued from admission, running from start to done, a tick at the first byte. */
  function spanBar(c: Call, t0: number, span: number): DomElement {
    const x = (ms: number) => Math.max(0, Math.min(BAR.width, ((ms - t0) / span) * BAR.width));
    const run = Math.max(1.5, x(c.done_at) - x(c.started_at));
    return s(
      "svg",
      { class: "span-bar", viewBox: `0 0 ${BAR.width} ${BAR.height}`, width: BAR.width, height: BAR.height, "aria-hidden": "true" },
      s("rect", { class: "track", x: 0, y: 0, width: BAR.width, height: BAR.height, rx: 3 }),
      s("rect", { class: "queued", x: x(c.admitted_at), y: 3, width: Math.max(0, x(c.started_at) - x(c.admitted_at)), height: 4 }),
      s("rect", { class: c.error === null && c.status < 400 ? "run" : "run failed", x: x(c.started_at), y: 0, width: run, height: BAR.height, rx: 2 }),
      c.first_byte_at === null ? null : s("rect", { class: "first-byte", x: x(c.first_byte_at) - 0.75, y: 0, width: 1.5, height: BAR.height }),
    );
  }

  /** Why the training sequence stops at call `c`: its tokens are not known, or they drifted. */
  const tokensUnknown = (c: Call): boolean => c.truncated || c.uncaptured || c.prefix_missing || c.tokens === null;

  /** What is out of the ordinary about a call, each as a pill a reader can spot down the column. */
  function marks(c: Call, i: number, driftAt: number | null): DomElement[] {
    const out: DomElement[] = [];
    if (c.prefix_missing) out.push(h("span", { class: "pill bad", "data-mark": "prefix-missing", title: "The call this one continues is not in the ledger (a batch lost, removed by retention): its messages are only what it added." }, "prefix missing"));
    if (c.messages_splice === "rewritten") out.push(h("span", { class: "pill bad", "data-mark": "rewritten", title: "This call's messages do not begin with the previous call's messages and answer: the client rewrote or trimmed its history." }, "history rewritten"));
    if (driftAt === i && tokensUnknown(c)) out.push(h("span", { class: "pill busy", "data-mark": "drift", title: "This call's tokens are not known (truncated, not recorded, not captured, or its prefix missing): the training sequence stops before it." }, "training stops"));
    else if (driftAt === i || c.tokens?.splice === "rewritten") out.push(h("span", { class: "pill busy", "data-mark": "drift", title: "This call's prompt token ids do not begin with the previous prompt and completion: the training sequence stops before it." }, "tokens drifted"));
    if (c.after_claim_end) out.push(h("span", { class: "pill", "data-mark": "after-end", title: "The claim had ended before this call finished." }, "after claim end"));
    if (c.truncated) out.push(h("span", { class: "pill", "data-mark": "truncated", title: "Over the record cap: messages and tokens left out, answer cut short." }, "truncated"));
    if (c.uncaptured) out.push(h("span", { class: "pill", "data-mark": "uncaptured", title: "Relayed while the ledger's capture was off: only its status and times are kept." }, "not captured"));
    if (c.stream) out.push(h("span", { class: "pill", "data-mark": "stream" }, "stream"));
    return out;
  }

  function callRow(c: Call, i: number, t: Trajectory, t0: number, span: number, shown: number, onShow: (i: number) => void): DomElement {
    const failed = c.error !== null || c.status >= 400;
    return h(
      "tr",
      {
        class: `call${i === shown ? " current" : ""}`,
        "data-call": i,
        "data-call-id": c.call_id,
        "data-status": c.status,
        "data-splice": c.messages_splice,
        "data-latency-ms": c.done_at - c.started_at,
        "data-weight-version": c.weight_version ?? "",
        onclick: () => onShow(i),
        title: `${c.model} · ${c.endpoint} · admitted ${fmt.at(c.admitted_at)}`,
      },
      h("td", { class: "num" }, h("button", { type: "button", class: "link", "aria-label": `Show call ${i + 1}'s conversation` }, `#${i + 1}`)),
      h("td", { class: "num muted" }, `+${fmt.ms(c.admitted_at - t0)}`),
      h("td", {}, spanBar(c, t0, span)),
      h("td", { class: "num" }, fmt.ms(c.done_at - c.started_at)),
      h("td", { class: "num" }, c.first_byte_at === null ? "–" : fmt.ms(c.first_byte_at - c.started_at)),
      h("td", { class: "num tokens", title: c.usage === null ? "" : tokensText(c.usage) }, c.usage === null ? "–" : `${fmt.count(c.usage.prompt_tokens)} / ${fmt.count(c.usage.completion_tokens)}`),
      h("td", { class: "num" }, c.weight_version === null ? "–" : String(c.weight_version)),
      h(
        "td",
        { class: "call-status" },
        h("span", { class: `pill ${failed ? "bad" : "good"}` }, String(c.status)),
        c.finish_reason === null ? null : h("span", { class: "muted" }, ` ${c.finish_reason}`),
        ...marks(c, i, t.training?.drift_at_call ?? null).flatMap((m) => [" ", m]),
        c.error === null ? null : h("div", { class: "call-error" }, c.error),
      ),
    );
  }

  function eventRow(kind: string, offset: string, text: string, title: string): DomElement {
    return h("tr", { class: "event", "data-event": kind, title }, h("td", {}), h("td", { class: "num muted" }, offset), h("td", { colspan: 6 }, text));
  }

  function timeline(t: Trajectory, shown: number, onShow: (i: number) => void): DomElement {
    const first = t.calls[0];
    const t0 = first?.admitted_at ?? t.ended_at ?? 0;
    // The bars share the calls' span: a client that ends its claim long after its last call would squeeze them to a sliver.
    const span = Math.max(1, ...t.calls.map((c) => c.done_at - t0));
    const ended =
      t.outcome === null
        ? eventRow("live", "", "still claimed: the calls so far", "")
        : eventRow(t.outcome, t.ended_at === null ? "" : `+${fmt.ms(t.ended_at - t0)}`, `${t.outcome}${t.ended_at === null ? "" : ` at ${fmt.at(t.ended_at)}`}`, "");
    return h(
      "table",
      { id: "episode-timeline", class: "timeline", "data-calls": t.calls.length },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          h("th", { class: "num" }, "Call"),
          h("th", { class: "num" }, "At"),
          h("th", {}, "Span"),
          h("th", { class: "num", title: "done − started" }, "Latency"),
          h("th", { class: "num", title: "first byte − started" }, "First byte"),
          h("th", { class: "num", title: "prompt / completion tokens" }, "Tokens in / out"),
          h("th", { class: "num" }, "Weights"),
          h("th", {}, "Status"),
        ),
      ),
      h(
        "tbody",
        {},
        first === undefined ? eventRow("no-calls", "", "no LLM call was recorded for this claim", "") : eventRow("first-admitted", "+0 ms", `first call admitted at ${fmt.at(first.admitted_at)}`, ""),
        ...t.calls.map((c, i) => callRow(c, i, t, t0, span, shown, onShow)),
        ended,
      ),
    );
  }

  function trainingLine(t: Trajectory): DomElement | null {
    const tr = t.training;
    if (tr === null) return null;
    const at = tr.drift_at_call === null ? undefined : t.calls[tr.drift_at_call];
    const why =
      t.calls_cut && tr.drift_at_call === t.calls.length
        ? `the first past the ${fmt.count(t.calls.length)} a trajectory answers (the claim has ${fmt.count(t.calls_recorded ?? t.calls.length)})`
        : at !== undefined && tokensUnknown(at)
          ? "whose tokens are not known"
          : "whose prompt tokens drifted";
    const drift = tr.drift_at_call === null ? "every turn spliced" : `stops at call #${tr.drift_at_call + 1}, ${why}`;
    return h(
      "p",
      { class: "sub", id: "episode-training", "data-tokens": tr.tokens.length, "data-drift-at-call": tr.drift_at_call ?? "" },
      `Training sequence: ${fmt.count(tr.tokens.length)} tokens, ${fmt.count(tr.response_length)} of response in ${tr.segments.length} segment${tr.segments.length === 1 ? "" : "s"}; ${drift}.`,
    );
  }

  function conversationOf(t: Trajectory, shown: number, loadMedia: MediaLoader): DomElement {
    const c = t.calls[shown];
    if (c === undefined) return h("p", { class: "sub" }, "No conversation: no LLM call was recorded for this claim.");
    const rewritten = c.messages_splice === "rewritten";
    // The page reads the delta form: only the call shown is made whole.
    const messages = delta.messagesOf(t, shown);
    return h(
      "div",
      { id: "episode-conversation", "data-call": shown },
      h(
        "h3",
        {},
        `Call #${shown + 1} of ${t.calls.length}${t.calls_cut ? ` shown (${fmt.count(t.calls_recorded ?? t.calls.length)} recorded)` : shown === t.calls.length - 1 ? " (the last)" : ""}: the ${messages.length} message${messages.length === 1 ? "" : "s"} it was given, then its answer`,
      ),
      rewritten
        ? h("p", { class: "mark-note", "data-mark": "rewritten" }, `These messages do not continue call #${shown}'s conversation: the client rewrote or trimmed its history before this call.`)
        : null,
      c.truncated ? h("p", { class: "mark-note" }, "This call was over the record cap: its messages were left out and its answer cut short.") : null,
      conversation.render(messages, c.answer, loadMedia),
      c.answer === null ? h("p", { class: "call-error" }, c.error === null ? "No answer was recorded." : `No answer: ${c.error}`) : null,
    );
  }

  function render(t: Trajectory, shownCall: number | null, handlers: EpisodeHandlers): DomElement {
    const shown = shownCall ?? t.calls.length - 1;
    return h(
      "div",
      { id: "episode-view", "data-episode": t.episode_uuid, "data-fence": t.fence, "data-outcome": t.outcome ?? "", "data-reward": t.reward ?? "", "data-calls": t.calls.length },
      facts(t),
      h("h3", {}, "Timeline"),
      timeline(t, shown, handlers.onShowCall),
      trainingLine(t),
      conversationOf(t, shown, handlers.loadMedia),
      t.workflow_output === null
        ? null
        : h("details", { class: "workflow-output" }, h("summary", {}, "Workflow output as the client reported it"), h("pre", {}, JSON.stringify(t.workflow_output, null, 2))),
    );
  }

  return { render };
}
export type EpisodeView = ReturnType<typeof episodeViewModule>;
