/** The dashboard's styles: system fonts only (nothing fetched), light, calm colours, red only for trouble. */
export const DASHBOARD_CSS = `
:root {
  --bg: #f5f6f8; --card: #fff; --line: #e4e7ec; --text: #1d2330; --muted: #667085;
  --accent: #2f6fed; --accent-soft: rgba(47, 111, 237, 0.16);
  --good: #12a150; --busy: #dc9a00; --off: #98a2b3; --bad: #d92d20;
  --registered: #a9c1f7; --claimed: #2f6fed; --resetting: #dc9a00;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", "Liberation Sans", sans-serif;
  font-size: 14px; color: var(--text); background: var(--bg);
}
* { box-sizing: border-box; }
body { margin: 0; }
.top { display: flex; align-items: center; gap: 16px; padding: 10px 24px; background: #151b28; color: #fff; }
.brand { color: #fff; text-decoration: none; font-weight: 650; font-size: 15px; display: flex; align-items: center; gap: 8px; white-space: nowrap; }
.logo { width: 14px; height: 14px; border-radius: 4px; background: linear-gradient(135deg, #5b8cff, #2f6fed 55%, #12a150); }
#engines { display: flex; align-items: center; gap: 6px; flex: 1; min-width: 0; }
.engine-tabs { display: flex; gap: 6px; min-width: 0; overflow: hidden; }
.engine-tab { display: flex; align-items: center; gap: 6px; flex: none; max-width: 24em; white-space: nowrap; border: 1px solid #2c3548; background: #1e2637; color: #d0d5dd; border-radius: 999px; padding: 4px 12px; font: inherit; cursor: pointer; }
.tab-name { overflow: hidden; text-overflow: ellipsis; }
.engine-tabs.picking .engine-tab { flex: 0 1 auto; min-width: 0; }
.engine-tabs.picking .tab-name { min-width: 4em; }
.engine-picker { position: relative; flex: 0 1 240px; min-width: 120px; }
#engine-search { width: 100%; border: 1px solid #2c3548; background: #1e2637; color: #fff; border-radius: 999px; padding: 4px 12px; font: inherit; }
#engine-search::placeholder { color: #98a2b3; }
#engine-search:focus { outline: 2px solid var(--accent); outline-offset: 1px; }
.engine-popup { position: absolute; top: calc(100% + 6px); left: 0; z-index: 20; width: 360px; max-width: calc(100vw - 32px); background: var(--card); color: var(--text); border: 1px solid var(--line); border-radius: 10px; box-shadow: 0 10px 28px rgba(16, 24, 40, 0.22); overflow: hidden; }
#engine-options { list-style: none; margin: 0; padding: 4px; max-height: min(420px, 60vh); overflow-y: auto; }
.engine-option { display: flex; align-items: center; gap: 8px; padding: 6px 10px; border-radius: 6px; cursor: pointer; white-space: nowrap; }
.engine-option:hover { background: var(--bg); }
.engine-option[aria-selected="true"] { background: var(--accent-soft); }
.engine-option.current { font-weight: 600; }
.option-name { flex: 1; overflow: hidden; text-overflow: ellipsis; }
.engine-option .tab-status { color: var(--muted); opacity: 1; }
.engine-count { margin: 0; padding: 6px 14px; border-top: 1px solid var(--line); color: var(--muted); font-size: 12px; }
.engine-tab.current { background: #fff; color: var(--text); border-color: #fff; }
a.engine-tab { text-decoration: none; }
.engine-tab.add { color: #98a2b3; border-style: dashed; background: transparent; }
.tab-status { font-size: 11px; opacity: 0.7; }
.updated { color: #98a2b3; font-size: 12px; white-space: nowrap; }
main { max-width: 1180px; margin: 0 auto; padding: 20px 24px 40px; }
.title-row { display: flex; align-items: baseline; gap: 16px; margin-bottom: 12px; }
.title-row h1 { margin: 0; font-size: 22px; font-weight: 650; }
.spacer { flex: 1; }
.link { background: none; border: none; color: var(--accent); font: inherit; cursor: pointer; padding: 0; text-decoration: none; }
.link:hover { text-decoration: underline; }
.cards { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 16px; margin-bottom: 16px; }
.cards.two { grid-template-columns: repeat(2, minmax(0, 1fr)); }
@media (max-width: 820px) { .cards, .cards.two { grid-template-columns: 1fr; } }
.card, .panel { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 14px 16px; min-width: 0; }
.panel { margin-bottom: 16px; }
.cards .panel { margin-bottom: 0; }
h2 { margin: 0 0 10px; font-size: 12px; font-weight: 600; color: var(--muted); text-transform: uppercase; letter-spacing: 0.05em; }
.sub { color: var(--muted); margin: 6px 0 0; font-size: 13px; overflow-wrap: anywhere; }
.sub.workers.exited { color: #b42318; font-weight: 600; }
.sub.refusals { color: #b42318; padding-left: 18px; }
.sub.full, .sub.outbox.stuck, .since.long, .sub.relay.failing, .sub.host-ledger.lost { color: #b42318; font-weight: 600; }
.since { color: var(--muted); margin-left: 8px; font-size: 13px; }
.big { font-size: 30px; font-weight: 650; margin: 0; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; margin: 0; padding: 4px 12px; border-radius: 999px; font-weight: 650; font-size: 15px; letter-spacing: 0.02em; }
.badge.good { background: #e3f6ea; color: #0b7a3b; }
.badge.busy { background: #fdf1d6; color: #8a5d00; }
.badge.off { background: #eef0f3; color: #475467; }
.dot { display: inline-block; width: 9px; height: 9px; border-radius: 50%; background: var(--off); flex: none; }
.dot.good { background: var(--good); } .dot.busy { background: var(--busy); } .dot.off, .dot.unknown { background: var(--off); }
.agent { display: flex; align-items: center; gap: 8px; margin: 0; font-size: 17px; font-weight: 600; }
.agent.on .dot { background: var(--good); box-shadow: 0 0 0 3px #e3f6ea; }
.stack { width: 100%; height: 14px; border-radius: 7px; overflow: hidden; display: block; }
.stack .track { fill: #eef0f3; }
.seg.registered, .swatch.registered { fill: var(--registered); background: var(--registered); }
.seg.claimed, .swatch.claimed { fill: var(--claimed); background: var(--claimed); }
.seg.resetting, .swatch.resetting { fill: var(--resetting); background: var(--resetting); }
.seg.delivered, .swatch.delivered { fill: var(--good); background: var(--good); }
.seg.pending, .swatch.pending { fill: var(--busy); background: var(--busy); }
.seg.undeliverable, .swatch.undeliverable { fill: var(--bad); background: var(--bad); }
.legend { list-style: none; padding: 0; margin: 10px 0 0; display: flex; flex-wrap: wrap; gap: 6px 18px; }
.legend li { display: flex; align-items: center; gap: 6px; color: var(--muted); }
.legend strong { color: var(--text); font-variant-numeric: tabular-nums; }
.swatch { width: 10px; height: 10px; border-radius: 3px; display: inline-block; }
.seg.ready, .swatch.ready { fill: var(--claimed); background: var(--claimed); }
.seg.dropped, .swatch.dropped { fill: var(--bad); background: var(--bad); }
.figures { display: grid; grid-template-columns: repeat(4, minmax(0, 1fr)); gap: 8px 12px; margin: 12px 0 0; }
.figures div { min-width: 0; }
.figures dt { color: var(--muted); font-size: 12px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.figures dd { margin: 2px 0 0; font-size: 17px; font-weight: 650; font-variant-numeric: tabular-nums; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.settings { margin-top: 12px; }
.pill { display: inline-block; padding: 1px 8px; border-radius: 999px; font-size: 12px; font-weight: 600; background: #eef0f3; color: #475467; }
.pill.good { background: #e3f6ea; color: #0b7a3b; } .pill.busy { background: #fdf1d6; color: #8a5d00; } .pill.bad { background: #fef3f2; color: #b42318; }
.run-head { display: flex; align-items: center; gap: 10px; flex-wrap: wrap; margin: 0; }
.run-current table, .run-current .figures { margin-top: 10px; }
.recent-runs { margin-top: 16px; }
h3 { margin: 0 0 6px; font-size: 12px; font-weight: 600; color: var(--muted); }
tr.current td { background: #f5f8ff; }
td.run-id { max-width: 13em; overflow: hidden; text-overflow: ellipsis; }
td.when { color: var(--muted); font-size: 12.5px; white-space: normal; }
.panel-problem { margin: 0 0 10px; padding: 8px 12px; border-radius: 8px; background: #fffaeb; border: 1px solid #fedf89; color: #7a4d00; }
.chart { width: 100%; height: auto; display: block; }
.chart .grid line { stroke: #eef0f3; }
.chart .axis text { fill: var(--muted); font-size: 12px; }
.chart .axis line { stroke: #c9ced6; }
.chart .axis .label { font-size: 12px; fill: var(--muted); }
.chart .band { fill: var(--accent-soft); stroke: none; }
.chart .mean { fill: none; stroke: var(--accent); stroke-width: 2.25; stroke-linejoin: round; }
.chart .point { fill: #fff; stroke: var(--accent); stroke-width: 1.75; }
.chart .point.last { fill: var(--accent); }
.chart .point:hover { stroke-width: 3; }
.chart .point.off-scale { fill: #fff; stroke: var(--bad, #c0392b); stroke-dasharray: 2 1.5; }
.run-picker { display: flex; align-items: center; gap: 8px; margin: 0 0 8px; color: var(--muted, #667085); }
.run-picker select { font: inherit; padding: 2px 6px; border: 1px solid var(--line); border-radius: 6px; background: #fff; }
.chart-summary { margin: 0 0 8px; color: var(--muted); display: flex; align-items: center; gap: 6px; flex-wrap: wrap; }
.chart-summary .latest { margin-left: auto; color: var(--text); }
.key { display: inline-block; width: 18px; height: 10px; border-radius: 2px; }
.key.mean { height: 3px; background: var(--accent); }
.key.band { background: var(--accent-soft); margin-left: 10px; }
table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
th { text-align: left; font-weight: 600; color: var(--muted); font-size: 12px; padding: 6px 8px; border-bottom: 1px solid var(--line); }
td { padding: 6px 8px; border-bottom: 1px solid #f0f2f5; white-space: nowrap; }
.num { text-align: right; }
.mono { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
td.idle { display: flex; align-items: center; gap: 8px; }
td.idle span { color: var(--muted); font-size: 12.5px; }
.meter { width: 70px; height: 6px; border-radius: 3px; overflow: hidden; flex: none; }
.meter .track { fill: #eef0f3; }
.meter.calm .fill { fill: var(--good); } .meter.warm .fill { fill: var(--busy); } .meter.hot .fill { fill: var(--bad); }
.pager { display: flex; align-items: center; gap: 8px; margin-top: 10px; color: var(--muted); font-size: 13px; }
.pager span { flex: 1; }
button { font: inherit; }
.pager button, .login button { border: 1px solid var(--line); background: #fff; border-radius: 6px; padding: 4px 10px; cursor: pointer; }
.pager button:disabled { opacity: 0.4; cursor: default; }
.ranked { display: grid; gap: 7px; margin-top: 12px; }
.ranked-row { display: grid; grid-template-columns: minmax(0, 11em) 1fr 3.5em; align-items: center; gap: 10px; }
.ranked-label { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.ranked-bar { width: 100%; height: 10px; }
.ranked-bar rect { fill: var(--claimed); }
.ranked-value { text-align: right; font-variant-numeric: tabular-nums; font-weight: 600; }
.more { color: var(--muted); margin: 6px 0 0; }
.empty { border: 1px dashed #cfd4dc; border-radius: 10px; padding: 18px; color: var(--muted); text-align: center; background: #fafbfc; }
#quiet-hint { margin-bottom: 16px; }
.empty p { margin: 4px 0; }
.empty-title { color: var(--text); font-weight: 600; }
.notice { border-radius: 10px; padding: 12px 16px; margin-bottom: 16px; border: 1px solid; }
.notice p { margin: 4px 0 0; }
.notice.error { background: #fef3f2; border-color: #fecdca; color: #912018; }
.notice.warning { background: #fffaeb; border-color: #fedf89; color: #7a4d00; }
.notice.info { background: #eff4ff; border-color: #c7d7fe; color: #1d3f8f; }
.login { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 16px; margin-bottom: 16px; }
.login p { margin: 0 0 10px; }
.login .fields { display: flex; gap: 12px; align-items: end; flex-wrap: wrap; }
.login label { display: flex; flex-direction: column; gap: 4px; font-size: 12px; color: var(--muted); font-weight: 600; }
.login label.grow { flex: 1; min-width: 240px; }
.login input { font: inherit; padding: 6px 8px; border: 1px solid #cfd4dc; border-radius: 6px; color: var(--text); }
.login button[type=submit] { background: var(--accent); color: #fff; border-color: var(--accent); padding: 6px 16px; }
tr.clickable { cursor: pointer; }
tr.clickable:hover td { background: #f5f8ff; }
.muted { color: var(--muted); }
.chart .point.clickable { cursor: pointer; }
.sub.capture.off { color: var(--muted); font-style: italic; }
.filter-line { margin: 0 0 10px; color: var(--muted); display: flex; align-items: center; gap: 8px; }
.episode-head { display: flex; align-items: baseline; gap: 12px; margin-bottom: 4px; }
.episode-head h2 { margin: 0; }
.episode-id { color: var(--text); overflow-wrap: anywhere; }
.episode-facts { grid-template-columns: repeat(4, minmax(0, 1fr)); margin: 8px 0 16px; }
.episode-facts dd { font-size: 15px; }
#episode h3 { margin: 16px 0 6px; }
table.timeline td { vertical-align: top; }
table.timeline tr.event td { color: var(--muted); font-style: italic; background: #fafbfc; }
table.timeline tr.call { cursor: pointer; }
table.timeline tr.call.current td { background: #f5f8ff; }
table.timeline td.call-status { white-space: normal; }
.span-bar { display: block; margin-top: 3px; }
.span-bar .track { fill: #eef0f3; }
.span-bar .queued { fill: #c7d7fe; }
.span-bar .run { fill: var(--accent); }
.span-bar .run.failed { fill: var(--bad); }
.span-bar .first-byte { fill: #151b28; }
.call-error { color: #b42318; font-size: 12.5px; margin-top: 4px; white-space: pre-wrap; overflow-wrap: anywhere; }
.mark-note { margin: 0 0 10px; padding: 8px 12px; border-radius: 8px; background: #fef3f2; border: 1px solid #fecdca; color: #912018; }
.conversation { display: grid; gap: 8px; }
.msg { border: 1px solid var(--line); border-left: 4px solid var(--off); border-radius: 8px; padding: 8px 12px; background: #fff; min-width: 0; }
.msg.role-system { border-left-color: #98a2b3; background: #fafbfc; }
.msg.role-user { border-left-color: var(--accent); }
.msg.role-assistant { border-left-color: var(--good); }
.msg.role-tool { border-left-color: var(--busy); background: #fffcf5; }
.msg.answer { box-shadow: 0 0 0 2px #e3f6ea; }
.msg-head { display: flex; align-items: center; gap: 8px; margin-bottom: 4px; font-size: 12.5px; }
.msg-role { font-weight: 650; text-transform: uppercase; letter-spacing: 0.04em; font-size: 11.5px; color: var(--muted); }
.msg-text { margin: 0; white-space: pre-wrap; overflow-wrap: anywhere; font: inherit; }
.msg-media { margin: 6px 0; }
.msg-image { display: block; max-width: 100%; max-height: 420px; border: 1px solid var(--line); border-radius: 6px; }
.msg-media figcaption:empty { display: none; }
.tool-call { margin-top: 6px; border-radius: 6px; background: #f5f6f8; padding: 6px 10px; }
.tool-call-head { font-size: 12.5px; color: var(--muted); }
.tool-call-head strong { color: var(--text); }
.tool-args { margin: 4px 0 0; white-space: pre-wrap; overflow-wrap: anywhere; font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
.reasoning summary, .workflow-output summary { cursor: pointer; color: var(--muted); font-size: 12.5px; }
.workflow-output { margin-top: 14px; }
.workflow-output pre { background: #f5f6f8; border-radius: 6px; padding: 8px 10px; overflow: auto; font-size: 12.5px; }
`;
