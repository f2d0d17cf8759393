/**
 * Rollout Exchange: the Worker. Stateless: authenticates, validates, and hands each engine's
 * requests to that engine's Durable Object.
 */
import { Hono } from "hono";
import type { Env } from "./env";
import { adminRoutes } from "./http/admin-routes";
import { engineRouteGate, serveEngineApi } from "./http/engine-routes";
import { errorResponse, internalError } from "./http/errors";
import { limitBody } from "./http/body";
import { serveRelay } from "./relay/relay-routes";
import { dashboardRoutes } from "./dashboard/routes";
import { openApiRoutes } from "./openapi/routes";
import { runRoutes } from "./runs/routes";
import { ledgerRoutes } from "./ledger/routes";
import { atroposRoutes } from "./atropos/routes";
import { routingPath } from "./http/path-token";
import { rateLimited } from "./http/rate-limit";
import { unsafeHead } from "./http/unsafe-head";

export { EngineObject } from "./engine/engine-object";

// Routing sees token-in-path URLs without their token (path-token.ts), so each route is registered once.
const app = new Hono<{ Bindings: Env }>({ getPath: routingPath });

app.use("*", limitBody);

app.get("/health", (c) => c.json({ ok: true }));
app.route("/admin", adminRoutes);
// Training runs and their MCP endpoint (state in D1), answered before the engine routes see the path.
runRoutes(app, "/e/:engine");
// The trajectory ledger (state in D1 and R2), likewise.
ledgerRoutes(app, "/e/:engine");
// Atropos's trajectory API (state in the engine's object, its own HTTP shape), likewise.
atroposRoutes(app, "/e/:engine");
// The engine API itself is served before the router (serveEngineApi, below).
engineRouteGate(app, "/e/:engine");
// The dashboard and the API reference: pages that ask for a token themselves, and the OpenAPI document.
app.route("/", dashboardRoutes);
app.route("/", openApiRoutes);

// The path as routed: a token in it (`/t/<token>`) is not repeated in an answer clients may log.
app.notFound((c) => errorResponse(404, "not_found", `No route ${c.req.method} ${routingPath(c.req.raw)}.`));
app.onError((err) => internalError(err));

// The relay's calls (per-claim keys, not engine tokens) and the engine API are served before the router.
function serve(request: Request, env: Env, ctx: ExecutionContext): Response | Promise<Response> {
  return unsafeHead(request, env) ?? serveRelay(request, env, ctx) ?? serveEngineApi(request, env) ?? app.fetch(request, env, ctx);
}

export default {
  fetch(request, env, ctx) {
    // Request limits first (http/rate-limit.ts): a request over its limit costs no engine call.
    const limited = rateLimited(request, env);
    if (limited === null) return serve(request, env, ctx);
    return limited.then(async (verdict) => verdict.refusal ?? verdict.served(await serve(request, env, ctx)));
  },
} satisfies ExportedHandler<Env>;
