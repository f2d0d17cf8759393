/**
 * Rollout Exchange: the Worker. Stateless: authenticates, validates, and hands each engine's
 * requests to that engine's Durable Object.
 */
import { Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import type { Env } from "./env";
import { adminRoutes } from "./http/admin-routes";
import { engineRoutes, type EngineVars } from "./http/engine-routes";
import { errorJson } from "./http/errors";
import { relayRoutes } from "./relay/relay-routes";
import { dashboardRoutes } from "./dashboard/routes";
import { openApiRoutes } from "./openapi/routes";
import { runRoutes } from "./runs/routes";
import { routingPath } from "./http/path-token";

export { EngineObject } from "./engine/engine-object";

/**
 * Large enough for a long workflow output; anything bigger is refused before it is read.
 * Not exported: workerd accepts only handlers and classes as the main module's exports.
 */
const MAX_BODY_BYTES = 4 * 1024 * 1024;

// Routing sees token-in-path URLs without their token (path-token.ts), so each route is registered once.
const app = new Hono<{ Bindings: Env; Variables: EngineVars }>({ getPath: routingPath });

app.use(
  "*",
  bodyLimit({
    maxSize: MAX_BODY_BYTES,
    onError: (c) => errorJson(c, 413, "payload_too_large", `The request body exceeds ${MAX_BODY_BYTES} bytes.`),
  }),
);

app.get("/health", (c) => c.json({ ok: true }));
app.route("/admin", adminRoutes);
// Before the engine routes: LLM calls authenticate with their per-claim key, not an engine token.
relayRoutes(app);
// Training runs and their MCP endpoint (state in D1), answered before the engine routes see the path.
runRoutes(app, "/e/:engine");
engineRoutes(app, "/e/:engine");
// The dashboard and the API reference: pages that ask for a token themselves, and the OpenAPI document.
app.route("/", dashboardRoutes);
app.route("/", openApiRoutes);

app.notFound((c) => errorJson(c, 404, "not_found", `No route ${c.req.method} ${new URL(c.req.url).pathname}.`));
app.onError((err, c) => {
  console.error("unhandled error", err);
  return errorJson(c, 500, "internal_error", err instanceof Error ? err.message : String(err));
});

export default app satisfies ExportedHandler<Env>;
