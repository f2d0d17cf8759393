/** Serves the OpenAPI document at /openapi.json and the interactive reference at /docs. */
import { Hono } from "hono";
import { staticText } from "../dashboard/routes";
import { buildOpenApiDocument, type OpenApiDocument } from "./document";
import { DOCS_CSS, DOCS_HTML, docsScript } from "./docs-page";

let cached: OpenApiDocument | undefined;

export const openApiRoutes = new Hono();

// Public, like the routes' shapes themselves: it holds no secret and no engine's data.
openApiRoutes.get("/openapi.json", (c) => c.json((cached ??= buildOpenApiDocument())));
openApiRoutes.get("/docs", (c) => staticText(c, DOCS_HTML, "text/html; charset=utf-8"));
openApiRoutes.get("/docs/app.js", (c) => staticText(c, docsScript(), "text/javascript; charset=utf-8"));
openApiRoutes.get("/docs/app.css", (c) => staticText(c, DOCS_CSS, "text/css; charset=utf-8"));
