/** The /docs page: its HTML shell, extra styles and script (the dashboard's look, served by the Worker). */
import { composeScript } from "../dashboard/script";
import { domModule } from "../dashboard/client/dom";
import { DASHBOARD_CSS } from "../dashboard/page-css";
import { pageHead } from "../dashboard/page-html";
import { exampleModule } from "./client/example";
import { docsModule } from "./client/docs";

export const DOCS_HTML = `${pageHead("API reference · Rollout Exchange", "/docs")}
<body>
<header class="top">
  <a class="brand" href="/dashboard"><span class="logo" aria-hidden="true"></span>Rollout Exchange</a>
  <nav id="engines"><a class="engine-tab" href="/dashboard">Dashboard</a><a class="engine-tab current" href="/docs">API reference</a></nav>
  <a class="updated" href="/openapi.json">openapi.json</a>
</header>
<main>
  <div class="title-row"><h1>API reference</h1><span class="sub"><span id="op-count">…</span> operations</span></div>
  <p class="intro">Engine routes live under <code>/e/{engine}</code> and take a token as <code>Authorization: Bearer &lt;token&gt;</code>.
  Clients that cannot send headers (AgentJet's SwarmClient) use the same routes under <code>/e/{engine}/t/{token}</code>.
  Each route lists the roles whose tokens may call it. Every error answer is <code>{"error": code, "detail": sentence}</code>.</p>
  <form id="auth" class="login">
    <div class="fields">
      <label>Engine <input id="auth-engine" autocomplete="off" spellcheck="false"></label>
      <label class="grow">Token for “Send” <input id="auth-token" type="password" autocomplete="off" spellcheck="false" placeholder="an engine token, or the admin token for /admin routes"></label>
    </div>
  </form>
  <div id="ops"><p class="sub">Loading /openapi.json…</p></div>
</main>
</body>
</html>
`;

const DOCS_EXTRA_CSS = `
.intro { color: var(--muted); max-width: 900px; line-height: 1.5; }
code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
.tag { margin-bottom: 20px; }
.op { border-top: 1px solid var(--line); }
.op > summary { display: flex; align-items: center; gap: 10px; padding: 9px 0; cursor: pointer; list-style: none; flex-wrap: wrap; }
.op > summary::-webkit-details-marker { display: none; }
.method { font-size: 11px; font-weight: 700; padding: 2px 6px; border-radius: 4px; min-width: 52px; text-align: center; color: #fff; }
.method.get { background: var(--good); } .method.post { background: var(--accent); } .method.delete { background: var(--bad); }
.path { font-weight: 600; }
.op-summary { color: var(--muted); flex: 1; min-width: 200px; }
.roles { display: flex; gap: 4px; }
.role { font-size: 11px; background: #eef0f3; color: #475467; border-radius: 999px; padding: 1px 8px; }
.op-body { padding: 4px 0 14px 62px; display: grid; gap: 10px; }
.params { display: flex; gap: 12px; flex-wrap: wrap; }
.params label, .body-label { display: flex; flex-direction: column; gap: 4px; font-size: 12px; color: var(--muted); }
.params input, textarea { font: inherit; padding: 5px 8px; border: 1px solid #cfd4dc; border-radius: 6px; }
textarea { width: 100%; font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
.send-row { display: flex; align-items: center; gap: 10px; }
.send { background: var(--accent); color: #fff; border: 1px solid var(--accent); border-radius: 6px; padding: 4px 14px; cursor: pointer; }
.result:empty { display: none; }
.result, .schemas pre { background: #151b28; color: #e4e7ec; border-radius: 8px; padding: 10px 12px; overflow: auto; max-height: 360px; margin: 0; font-size: 12.5px; }
.schemas details { margin-bottom: 4px; }
.schemas summary { cursor: pointer; color: var(--muted); }
`;

export const DOCS_CSS = DASHBOARD_CSS + DOCS_EXTRA_CSS;

let cached: string | undefined;
export function docsScript(): string {
  cached ??= composeScript(
    [
      { name: "dom", factory: domModule, deps: ["window"] },
      { name: "ex", factory: exampleModule },
      { name: "docs", factory: docsModule, deps: ["window", "dom", "ex"] },
    ],
    "docs.start();",
  );
  return cached;
}
