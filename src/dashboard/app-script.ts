/** The dashboard's script, assembled once from the typed factories in ./client. */
import { composeScript } from "./script";
import { domModule } from "./client/dom";
import { formatModule } from "./client/format";
import { apiModule } from "./client/api";
import { credentialsModule } from "./client/credentials";
import { chartGeometryModule } from "./client/chart-geometry";
import { chartModule } from "./client/chart";
import { barsModule } from "./client/bars";
import { statusViewModule } from "./client/status-view";
import { activityViewModule } from "./client/activity-view";
import { frameViewModule } from "./client/frame-view";
import { bufferViewModule } from "./client/buffer-view";
import { runsViewModule } from "./client/runs-view";
import { panelModule } from "./client/panel";
import { conversationViewModule } from "./client/conversation-view";
import { deltaMessagesModule } from "./client/delta-messages";
import { episodeViewModule } from "./client/episode-view";
import { trajectoryListViewModule } from "./client/trajectory-list-view";
import { trajectoriesModule } from "./client/trajectories";
import { mainModule } from "./client/main";

let cached: string | undefined;

export function dashboardScript(): string {
  cached ??= composeScript(
    [
      { name: "dom", factory: domModule, deps: ["window"] },
      { name: "fmt", factory: formatModule },
      { name: "api", factory: apiModule, deps: ["window"] },
      { name: "creds", factory: credentialsModule, deps: ["window.localStorage"] },
      { name: "geometry", factory: chartGeometryModule },
      { name: "chart", factory: chartModule, deps: ["dom", "fmt", "geometry"] },
      { name: "bars", factory: barsModule, deps: ["dom", "fmt"] },
      { name: "statusView", factory: statusViewModule, deps: ["dom", "fmt", "bars"] },
      { name: "activityView", factory: activityViewModule, deps: ["dom", "fmt", "bars", "chart"] },
      { name: "bufferView", factory: bufferViewModule, deps: ["dom", "fmt", "bars", "activityView.empty"] },
      { name: "runsView", factory: runsViewModule, deps: ["dom", "fmt", "activityView.empty"] },
      { name: "panel", factory: panelModule, deps: ["dom", "activityView.empty"] },
      { name: "frame", factory: frameViewModule, deps: ["dom", "fmt"] },
      { name: "conversationView", factory: conversationViewModule, deps: ["dom"] },
      { name: "deltaMessages", factory: deltaMessagesModule },
      { name: "episodeView", factory: episodeViewModule, deps: ["dom", "fmt", "conversationView", "deltaMessages"] },
      { name: "listView", factory: trajectoryListViewModule, deps: ["dom", "fmt", "activityView.empty"] },
      { name: "trajectories", factory: trajectoriesModule, deps: ["window", "{ dom, api, panel, listView, episodeView, empty: activityView.empty }"] },
      { name: "app", factory: mainModule, deps: ["window", "{ dom, api, creds, statusView, activityView, bufferView, runsView, panel, frame, trajectories }"] },
    ],
    "app.start();",
  );
  return cached;
}
