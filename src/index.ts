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

export { EngineObject } from "./engine/engine-object";

/**
 * Large enough for a long workflow output; anything bigger is refused before it is read.
 * Not exported: workerd accepts only handlers and classes as the main module's exports.
 */
const MAX_BODY_BYTES = 4 * 1024 * 1024;

const app = new Hono<{ Bindings: Env; Variables: EngineVars }>();

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
for (const prefix of ["/e/:engine/t/:token", "/e/:engine"]) runRoutes(app, prefix);
// The token-in-path form first, so /e/x/t/<token>/... is never read as an engine route named "t".
engineRoutes(app, "/e/:engine/t/:token");
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
