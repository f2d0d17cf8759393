/**
 * The trajectory panel and the episode view, with the state they keep between refreshes: the
 * pages of the list read so far, the reward chart's step filter, and the open episode (kept in
 * the address bar as ?episode=&fence= so a reload or a shared link opens it again). Both read
 * what viewers, operators and trainers may read and clients may not: a refusal is said in
 * place (panel.ts) and the rest of the page carries on.
 */
import type { Trajectory, TrajectorySummary } from "../../protocol/ledger";
import type { Api, Result, TaggedTrajectory, TrajectoryFilter } from "./api";
import type { BrowserWindow, Dom } from "./dom";
import type { Panel } from "./panel";
import type { TrajectoryListState, TrajectoryListView } from "./trajectory-list-view";
import type { EpisodeView } from "./episode-view";
import type { ActivityView } from "./activity-view";

export type TrajectoriesDeps = { dom: Dom; api: Api; panel: Panel; listView: TrajectoryListView; episodeView: EpisodeView; empty: ActivityView["empty"] };

export function trajectoriesModule(win: BrowserWindow, d: TrajectoriesDeps) {
  const { byId } = d.dom;
  const PAGE_SIZE = 20;
  const NO_FILTER: TrajectoryFilter = { run: null, global_step: null };

  const params = new URLSearchParams(win.location.search);
  const fenceText = params.get("fence");
  let open: { episode: string; fence: number | null } | null = params.get("episode")
    ? { episode: params.get("episode") ?? "", fence: fenceText !== null && /^\d+$/.test(fenceText) ? Number(fenceText) : null }
    : null;
  let engine: string | null = null;
  let token = "";
  let nowMs = Date.now();
  let filter = NO_FILTER;
  let rows: TrajectorySummary[] = [];
  let next: string | null = null;
  let pinned = false;
  /** The open episode's trajectory as drawn, with its ETag: a refresh asks whether it changed rather than for it again. */
  let shown: TaggedTrajectory | null = null;
  let shownCall: number | null = null;
  /** Each read takes a ticket; an answer that is not the newest read's is dropped, so a slow one cannot draw over a later one. */
  let listTicket = 0;
  let episodeTicket = 0;
  let bound = false;
  /**
   * Media read for the conversations drawn, least recently drawn first: a redraw (each refresh
   * of a live episode) or another call's view draws them again without reading. What the last
   * draw named is kept whatever its number (a computer-use agent's history holds dozens of
   * screenshots); others up to MEDIA_KEPT in all, dropped as a draw begins. Only the exchange's
   * lasting answers are kept: the medium, or 404 (retention removed it).
   */
  const media = new Map<string, { read: Promise<Result<string>>; draw: number }>();
  const MEDIA_KEPT = 24;
  let draw = 0;

  function loadMedia(sha256: string): Promise<Result<string>> {
    const key = `${engine ?? ""}/${sha256}`;
    const kept = media.get(key);
    media.delete(key);
    const read = kept?.read ?? (engine === null ? Promise.resolve<Result<string>>({ ok: false, problem: { status: 0, error: "no_engine", detail: "" } }) : d.api.media(engine, token, sha256));
    media.set(key, { read, draw });
    if (kept === undefined) {
      void read.then((r) => {
        if (!r.ok && r.problem.status !== 404 && media.get(key)?.read === read) media.delete(key);
      });
    }
    return read;
  }

  /** A draw begins: what the previous one named stays, the rest give way down to MEDIA_KEPT. */
  function beginDraw(): void {
    for (const [k, v] of media) {
      if (media.size <= MEDIA_KEPT) break;
      if (v.draw < draw) media.delete(k);
    }
    draw++;
  }

  function syncUrl(): void {
    const p = new URLSearchParams(win.location.search);
    p.delete("episode");
    p.delete("fence");
    if (open !== null) {
      p.set("episode", open.episode);
      if (open.fence !== null) p.set("fence", String(open.fence));
    }
    win.history.replaceState(null, "", `${win.location.pathname}?${p.toString()}`);
  }

  const state = (): TrajectoryListState => ({ rows, more: next !== null, pinned, filter, open });

  function drawList(r: Result<TrajectoryListState>): void {
    d.panel.draw("trajectories", "trajectories", r, (st) =>
      d.listView.render(st, nowMs, {
        onOpen: (episode, fence) => void openEpisode(episode, fence),
        onMore: () => {
          // Held from now on: a refresh's read of the first page must neither race this one nor undo it.
          pinned = true;
          void readList(next);
        },
        onNewest: () => {
          pinned = false;
          void readList(null);
        },
        onClearFilter: () => filterStep(null, null),
      }),
    );
  }

  /** The first page (replacing the list) when `cursor` is null, else the next older page (appended). */
  async function readList(cursor: string | null): Promise<void> {
    if (engine === null) return;
    const ticket = ++listTicket;
    const r = await d.api.trajectories(engine, token, PAGE_SIZE, cursor, filter);
    if (ticket !== listTicket) return;
    if (r.ok) {
      rows = cursor === null ? [...r.value.trajectories] : [...rows, ...r.value.trajectories];
      next = r.value.next_cursor;
    }
    drawList(r.ok ? { ok: true, value: state() } : r);
  }

  function drawEpisode(r: Result<Trajectory> | null): void {
    byId("episode-panel").hidden = open === null;
    byId("episode-id").textContent = open === null ? "" : `${open.episode}${open.fence === null ? "" : ` · fence ${open.fence}`}`;
    if (r === null) return;
    if (!r.ok && r.problem.status === 404) {
      // A live claim that has made no LLM call yet (or capture is off): nothing wrong, nothing to show.
      byId("episode-problem").hidden = true;
      byId("episode").replaceChildren(d.empty("episode-none", "No LLM call recorded for this claim", "Its calls appear here as the relay records them (when the engine's capture is on), and its outcome once it ends."));
      return;
    }
    beginDraw();
    d.panel.draw("episode", "trajectories", r, (t) =>
      d.episodeView.render(t, shownCall, {
        onShowCall: (i) => {
          shownCall = i;
          drawEpisode({ ok: true, value: t });
        },
        loadMedia,
      }),
    );
  }

  async function readEpisode(): Promise<void> {
    if (engine === null || open === null) return;
    const ticket = ++episodeTicket;
    const r = await d.api.trajectory(engine, token, open.episode, open.fence, shown?.etag ?? null);
    if (ticket !== episodeTicket || open === null) return;
    if (!r.ok) {
      shown = null;
      drawEpisode(r);
      return;
    }
    // What is drawn is still the claim's whole trajectory: nothing to parse or draw again.
    if (r.value === "unchanged") return;
    shown = r.value;
    drawEpisode({ ok: true, value: r.value.trajectory });
  }

  async function openEpisode(episode: string, fence: number | null): Promise<void> {
    open = { episode, fence };
    shown = null;
    shownCall = null;
    syncUrl();
    byId("episode").replaceChildren(d.dom.h("p", { class: "sub" }, "reading the episode's trajectory…"));
    drawEpisode(null);
    if (rows.length > 0) drawList({ ok: true, value: state() });
    byId("episode-panel").scrollIntoView({ block: "start" });
    await readEpisode();
  }

  function close(): void {
    open = null;
    shown = null;
    episodeTicket++;
    syncUrl();
    drawEpisode(null);
    if (rows.length > 0) drawList({ ok: true, value: state() });
  }

  /** The list narrowed to one global step of one run (from the reward chart), or widened again with nulls. */
  function filterStep(run: number | null, step: number | null): void {
    filter = step === null ? NO_FILTER : { run, global_step: step };
    pinned = false;
    rows = [];
    next = null;
    void readList(null).then(() => byId("trajectories-panel").scrollIntoView({ block: "start" }));
  }

  /** Everything again, for another engine. */
  function reset(): void {
    filter = NO_FILTER;
    rows = [];
    next = null;
    pinned = false;
    open = null;
    shown = null;
    listTicket++;
    episodeTicket++;
    syncUrl();
    d.panel.clear("trajectories");
    drawEpisode(null);
  }

  /**
   * One refresh of the page: the first page again unless the reader is paging older ones (ended
   * trajectories do not change, so what was read stays true), and the open episode again, ended
   * too (an unchanged one answers 304): its engine may have been deleted, or made again under
   * its name, and then it is no longer there to show.
   */
  async function refresh(forEngine: string, withToken: string, now: number): Promise<void> {
    if (!bound) {
      bound = true;
      byId("episode-close").addEventListener("click", close);
    }
    if (engine !== null && forEngine !== engine) reset();
    engine = forEngine;
    token = withToken;
    nowMs = now;
    drawEpisode(null);
    await Promise.all([pinned ? Promise.resolve() : readList(null), open !== null ? readEpisode() : Promise.resolve()]);
  }

  return { refresh, openEpisode, filterStep };
}
export type Trajectories = ReturnType<typeof trajectoriesModule>;
