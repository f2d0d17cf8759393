/**
 * The dashboard's controller: picks the engine and token (URL, then what this browser saved),
 * reads the engine's state from the exchange every few seconds (`?refresh=<seconds>`, default 5)
 * without reloading the page, and draws it. One refresh runs at a time; a failed refresh keeps
 * the last picture and says why.
 */
import type { BrowserWindow, DomInput } from "./dom";
import type { Dom } from "./dom";
import type { Api, Problem } from "./api";
import type { Credentials } from "./credentials";
import type { StatusView } from "./status-view";
import type { ActivityView } from "./activity-view";
import type { FrameView, NavEngine } from "./frame-view";
import type { BufferView } from "./buffer-view";
import type { RunsView } from "./runs-view";
import type { Panel } from "./panel";
import type { Trajectories } from "./trajectories";

export type MainDeps = {
  dom: Dom;
  api: Api;
  creds: Credentials;
  statusView: StatusView;
  activityView: ActivityView;
  bufferView: BufferView;
  runsView: RunsView;
  panel: Panel;
  frame: FrameView;
  trajectories: Trajectories;
};

export function mainModule(win: BrowserWindow, d: MainDeps) {
  const { byId } = d.dom;
  const PAGE_SIZE = 25;
  /** Runs listed in the runs panel; one more is read to know whether older ones exist. */
  const RECENT_RUNS = 5;
  /** Other engines in the switcher get a status dot each; past this many they are listed without one. */
  const NAV_STATUS_LIMIT = 12;

  const params = new URLSearchParams(win.location.search);
  const refreshSeconds = Math.min(3600, Math.max(0.2, Number(params.get("refresh") ?? "5") || 5));
  let engine = params.get("engine") ?? Object.keys(d.creds.load().tokens)[0] ?? "default";
  /** Cursors of the running-episode pages seen so far: [null, c1, c2, ...]; the last is the page shown. */
  let cursors: (string | null)[] = [null];
  /** The run of the history whose reward curve is shown; null: the current one, whichever it is. */
  let shownRun: number | null = null;
  /**
   * What the reward panel was last drawn from. It is drawn again only when that changes: a panel
   * replaced under the pointer loses a click whose press and release straddle the refresh, and
   * the chart's points are what a reader clicks.
   */
  let rewardsDrawnFrom = "";
  let timer: number | null = null;
  let inFlight = false;
  let again = false;
  let refreshes = 0;

  /** Keeps ?engine= in the address bar (so a reload or a shared link opens the same engine) and never ?token=. */
  function syncUrl(): void {
    const p = new URLSearchParams(win.location.search);
    p.delete("token");
    p.set("engine", engine);
    win.history.replaceState(null, "", `${win.location.pathname}?${p.toString()}`);
  }

  /**
   * A token is the admin's if the admin API accepts it; otherwise it is kept as this engine's.
   * Engine tokens are minted as `rx_<role>_...`, so those skip the probe (and its logged 403).
   */
  async function remember(forEngine: string, token: string): Promise<void> {
    if (!token.startsWith("rx_") && (await d.api.engines(token)).ok) d.creds.setAdmin(token);
    else d.creds.setEngineToken(forEngine, token);
  }

  function select(name: string): void {
    if (name !== engine) {
      cursors = [null];
      shownRun = null;
      // Nothing of the engine left is shown under the new one's name, whatever its first reads answer.
      for (const id of ["overview", "rewards", "episodes", "tasks-panel"]) byId(id).replaceChildren();
      rewardsDrawnFrom = "";
      d.panel.clear("buffer");
      d.panel.clear("runs");
    }
    engine = name;
    syncUrl();
    void refreshNow();
  }

  function explain(p: Problem): void {
    const what = `${p.status} ${p.error}${p.detail ? `: ${p.detail}` : ""}`;
    if (p.status === 401 || p.status === 403) {
      d.frame.notice({
        kind: "error",
        title: p.status === 401 ? `Engine '${engine}' did not accept this token` : `This token may not read engine '${engine}'`,
        text: `The exchange answered ${what}. The token may be revoked, mistyped or belong to another engine. Paste a valid viewer token (or any role's token) below.`,
      });
      d.frame.login(true, engine, "A token for this engine is needed.");
      byId("engine-view").hidden = true;
    } else if (p.status === 404) {
      d.frame.notice({ kind: "error", title: `No engine named '${engine}'`, text: `The exchange answered ${what}. Check the name, or ask the deployment's admin to create it.` });
      d.frame.login(true, engine, "Open another engine:");
      byId("engine-view").hidden = true;
    } else {
      // Network trouble or a server error: keep the last picture; the next refresh may succeed.
      d.frame.notice({
        kind: "warning",
        title: p.status === 0 ? "Cannot reach the exchange" : "The last refresh failed",
        text: `${p.status === 0 ? p.detail : what}. ${byId("overview").childElementCount > 0 ? "Showing the last data" : "Nothing read yet"}; retrying every ${refreshSeconds} s.`,
      });
    }
  }

  async function drawNav(currentStatus: string | null): Promise<void> {
    const saved = d.creds.load();
    // The engines this browser has a token for: all it knows without the admin list...
    let names = Object.keys(saved.tokens);
    if (saved.admin !== null) {
      const listed = await d.api.engines(saved.admin);
      // ...unless the admin list, which holds every engine of the deployment, proves them gone: an
      // engine it does not hold, or one whose delete is under way (it answers 404 meanwhile).
      if (listed.ok) names = listed.value.engines.filter((e) => typeof e.deleting_since !== "number").map((e) => e.name);
    }
    if (!names.includes(engine)) names.unshift(engine);
    names.sort();
    const tone = (s: string | null) => (s === null ? "unknown" : d.statusView.tone(s));
    const entries: NavEngine[] = await Promise.all(
      names.map(async (name, i): Promise<NavEngine> => {
        if (name === engine) return { name, status: currentStatus, tone: tone(currentStatus) };
        const t = d.creds.tokenFor(name);
        if (t === null || i >= NAV_STATUS_LIMIT) return { name, status: null, tone: "unknown" };
        const r = await d.api.status(name, t);
        return { name, status: r.ok ? r.value.engine_status : null, tone: tone(r.ok ? r.value.engine_status : null) };
      }),
    );
    d.frame.nav(entries, engine, select, () => d.frame.login(true, "", "Open another engine with its token:"));
  }

  async function refresh(): Promise<void> {
    const token = d.creds.tokenFor(engine);
    byId("engine-name").textContent = engine;
    if (token === null) {
      d.frame.notice(null);
      d.frame.login(true, engine, `Paste a token of engine '${engine}' to see it: a viewer token is enough (npm start prints one).`);
      byId("engine-view").hidden = true;
      await drawNav(null);
      return;
    }
    // The page of running episodes this refresh reads: a click on Next or Previous while it is in
    // flight changes `cursors`, and the page drawn must say which page it shows, not the next one.
    const shownPage = cursors.slice();
    // Draws its own panels (trajectories.ts); started with the other reads so the refresh waits for the slowest one only.
    const trajectoriesDrawn = d.trajectories.refresh(engine, token, Date.now());
    const [ov, history, historyRuns, running, done, health, runs, ledger, sync] = await Promise.all([
      d.api.overview(engine, token),
      d.api.rewardHistory(engine, token, shownRun),
      d.api.historyRuns(engine, token),
      d.api.runningEpisodes(engine, token, PAGE_SIZE, shownPage[shownPage.length - 1] ?? null),
      d.api.completedTasks(engine, token),
      d.api.health(engine, token),
      d.api.recentRuns(engine, token, RECENT_RUNS + 1),
      d.api.ledgerConfig(engine, token),
      d.api.syncConfig(engine, token),
    ]);
    if (!ov.ok) {
      await trajectoriesDrawn;
      return explain(ov.problem);
    }
    const failed = [history, running, done].find((r) => !r.ok);
    if (failed && !failed.ok) explain(failed.problem);
    else d.frame.notice(null);
    d.frame.login(false, engine, "");

    const now = Date.now();
    const o = ov.value;
    byId("overview").replaceChildren(d.statusView.render(o, ledger.ok ? ledger.value : null, sync.ok ? sync.value : null, now));
    if (history.ok) {
      const pick = (run: number | null) => {
        shownRun = run;
        void refreshNow();
      };
      const listed = historyRuns.ok ? historyRuns.value.runs : [];
      const run = history.value.run ?? null;
      const from = JSON.stringify([engine, history.value, listed]);
      if (from !== rewardsDrawnFrom) {
        rewardsDrawnFrom = from;
        byId("rewards").replaceChildren(d.activityView.rewards(history.value.history, listed, run, pick, (step) => d.trajectories.filterStep(run, step)));
      }
    } else if (shownRun !== null) {
      // The run picked is gone (the engine was made again): back to the current one, drawn anew
      // though its data may be what was drawn before the pick.
      shownRun = null;
      rewardsDrawnFrom = "";
    }
    if (running.ok) {
      // A page that emptied under us (episodes ended) sends the reader back to the first page.
      if (running.value.episodes.length === 0 && shownPage.length > 1) {
        cursors = [null];
        await trajectoriesDrawn;
        return refresh();
      }
      byId("episodes").replaceChildren(
        d.activityView.episodes(running.value, {
          page: shownPage.length - 1,
          pageSize: PAGE_SIZE,
          hasPrev: shownPage.length > 1,
          onPrev: () => {
            cursors = shownPage.slice(0, -1);
            void refreshNow();
          },
          onNext: () => {
            if (running.value.next_cursor !== null) cursors = [...shownPage, running.value.next_cursor];
            void refreshNow();
          },
          // The claim clicked, by its fence: once it is over, the episode's latest claim may be another client's.
          onOpen: (episode, fence) => void d.trajectories.openEpisode(episode, fence),
        }),
      );
    }
    if (done.ok) byId("tasks-panel").replaceChildren(d.activityView.tasks(done.value));
    // Not through explain(): a refused or failed buffer or runs read must not hide the whole page (panel.ts).
    d.panel.draw("buffer", "the rollout buffer", health, (v) => d.bufferView.render(v));
    d.panel.draw("runs", "training runs", runs, (v) => d.runsView.render(v, RECENT_RUNS, now));
    await trajectoriesDrawn;
    byId("engine-view").hidden = false;
    // A slime-style trainer never reports an engine status, nor does an Atropos trainer: a used
    // buffer, a run or Atropos's API in use is activity too.
    const quiet =
      o.engine_status === "ENGINE.OFFLINE" &&
      o.global_step === null &&
      o.episodes.registered + o.episodes.claimed === 0 &&
      !d.statusView.atroposInUse(o.atropos) &&
      !(health.ok && d.bufferView.inUse(health.value.buffer)) &&
      !(runs.ok && runs.value.list.runs.length > 0);
    byId("engine-view").setAttribute("data-quiet", String(quiet));
    byId("quiet-hint").hidden = !quiet;

    win.document.title = `${o.engine_status.replace(/^ENGINE\./, "")}${o.global_step === null ? "" : ` · step ${o.global_step}`} · ${engine} — Rollout Exchange`;
    await drawNav(o.engine_status);
  }

  /** Runs one refresh now (or right after the one in flight) and schedules the next. */
  async function refreshNow(): Promise<void> {
    if (inFlight) {
      again = true;
      return;
    }
    if (timer !== null) win.clearTimeout(timer);
    inFlight = true;
    try {
      await refresh();
    } catch (e) {
      d.frame.notice({ kind: "error", title: "The dashboard hit a bug", text: e instanceof Error ? e.message : String(e) });
    } finally {
      inFlight = false;
      refreshes += 1;
      const stamp = byId("updated");
      stamp.textContent = `updated ${new Date().toLocaleTimeString()} · every ${refreshSeconds} s`;
      stamp.setAttribute("data-refreshes", String(refreshes));
    }
    if (again) {
      again = false;
      return refreshNow();
    }
    timer = win.setTimeout(() => void refreshNow(), refreshSeconds * 1000);
  }

  async function start(): Promise<void> {
    byId("login").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const name = (byId("login-engine") as DomInput).value.trim() || engine;
      const token = (byId("login-token") as DomInput).value.trim();
      (byId("login-token") as DomInput).value = "";
      if (token === "") return;
      void remember(name, token).then(() => select(name));
    });
    byId("forget").addEventListener("click", () => {
      d.creds.forget(engine);
      void refreshNow();
    });
    const urlToken = params.get("token");
    if (urlToken !== null && urlToken !== "") await remember(engine, urlToken);
    syncUrl();
    await refreshNow();
  }

  return { start };
}
