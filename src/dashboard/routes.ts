/**
 * Serves the dashboard: /dashboard (the page), /dashboard/app.js and /dashboard/app.css.
 * No token is needed to load these: the page asks for one and sends it only with its API
 * reads. The Content-Security-Policy allows nothing but this origin, which keeps the page
 * honest about working offline (no CDN can sneak in) and blocks injected inline script.
 */
import { Hono, type Context } from "hono";
import { DASHBOARD_HTML } from "./page-html";
import { DASHBOARD_CSS } from "./page-css";
import { dashboardScript } from "./app-script";

export const PAGE_CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/** Answers static text with a content type, the page's CSP, and no caching (a deploy changes them at once). */
export function staticText(c: Context, body: string, contentType: string): Response {
  return c.body(body, 200, {
    "content-type": contentType,
    "content-security-policy": PAGE_CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
  });
}

export const dashboardRoutes = new Hono();

dashboardRoutes.get("/dashboard", (c) => staticText(c, DASHBOARD_HTML, "text/html; charset=utf-8"));
dashboardRoutes.get("/dashboard/app.js", (c) => staticText(c, dashboardScript(), "text/javascript; charset=utf-8"));
dashboardRoutes.get("/dashboard/app.css", (c) => staticText(c, DASHBOARD_CSS, "text/css; charset=utf-8"));
