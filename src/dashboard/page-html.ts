/**
 * The dashboard's HTML shell. Static: the script fills it in. Every id the script asks for
 * (dom.byId) is defined here. Styles and script come from the Worker itself (/dashboard/app.*),
 * so the page needs nothing from the internet.
 */

/**
 * The top of a page of ours: its stylesheet and script from `<assets>/app.css|js`, and an empty
 * icon so the browser does not ask for a /favicon.ico that does not exist.
 */
export const pageHead = (title: string, assets: string): string => `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title}</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${assets}/app.css">
<script src="${assets}/app.js" defer></script>
</head>`;

export const DASHBOARD_HTML = `${pageHead("Rollout Exchange", "/dashboard")}
<body>
<header class="top">
  <a class="brand" href="/dashboard"><span class="logo" aria-hidden="true"></span>Rollout Exchange</a>
  <nav id="engines" aria-label="Engines">
    <span id="engine-tabs" class="engine-tabs"></span>
    <div id="engine-picker" class="engine-picker" hidden>
      <input id="engine-search" type="search" role="combobox" aria-label="Find an engine" aria-autocomplete="list" aria-expanded="false" aria-controls="engine-options" autocomplete="off" spellcheck="false" placeholder="Find an engine…">
      <div id="engine-popup" class="engine-popup" hidden>
        <ul id="engine-options" role="listbox" aria-label="Engines"></ul>
        <p id="engine-count" class="engine-count" aria-live="polite"></p>
      </div>
    </div>
    <button type="button" class="engine-tab add" id="add-engine">+ engine</button>
  </nav>
  <span id="updated" class="updated" data-refreshes="0">loading…</span>
</header>
<main>
  <div class="title-row">
    <h1 id="engine-name"></h1>
    <span class="spacer"></span>
    <a class="link" href="/docs">API reference</a>
    <button id="forget" type="button" class="link">Forget token</button>
  </div>
  <div id="notice" class="notice" role="status" hidden></div>
  <form id="login" class="login" hidden>
    <p id="login-why"></p>
    <div class="fields">
      <label>Engine <input id="login-engine" name="engine" autocomplete="off" spellcheck="false"></label>
      <label class="grow">Token <input id="login-token" name="token" type="password" autocomplete="off" spellcheck="false" placeholder="rx_viewer_…"></label>
      <button type="submit">Open</button>
    </div>
    <p class="sub">The token stays in this browser (localStorage) and is sent only to this exchange. The deployment's admin token works too and lists every engine.</p>
  </form>
  <div id="engine-view" hidden>
    <div id="quiet-hint" class="empty" hidden>
      <p class="empty-title">No activity yet</p>
      <p>This engine is offline and has no episodes. It comes alive when an operator calls /start_engine and the trainer reports ENGINE.ROLLING.</p>
    </div>
    <div id="overview"></div>
    <section class="panel"><h2>Reward per global step</h2><div id="rewards"></div></section>
    <div class="cards two">
      <section class="panel"><h2>Running episodes</h2><div id="episodes"></div></section>
      <section class="panel"><h2>Tasks completed, current batch</h2><div id="tasks-panel"></div></section>
    </div>
    <section id="trajectories-panel" class="panel"><h2>Trajectories</h2><p id="trajectories-problem" class="panel-problem" role="status" hidden></p><div id="trajectories"></div></section>
    <section id="episode-panel" class="panel" hidden>
      <div class="episode-head"><h2>Episode</h2><span id="episode-id" class="mono episode-id"></span><span class="spacer"></span><button id="episode-close" type="button" class="link">Close</button></div>
      <p id="episode-problem" class="panel-problem" role="status" hidden></p>
      <div id="episode"></div>
    </section>
    <div class="cards two">
      <section class="panel"><h2>Rollout buffer</h2><p id="buffer-problem" class="panel-problem" role="status" hidden></p><div id="buffer"></div></section>
      <section class="panel"><h2>Training runs</h2><p id="runs-problem" class="panel-problem" role="status" hidden></p><div id="runs"></div></section>
    </div>
  </div>
  <noscript><p class="notice error">The dashboard needs JavaScript.</p></noscript>
</main>
</body>
</html>
`;
