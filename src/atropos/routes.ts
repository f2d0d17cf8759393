/**
 * Atropos's trajectory API (atroposlib/api/server.py, v0.4.0) under an engine's base URL at
 * /atropos, so that `rollout_server_url = https://<host>/e/<engine>/t/<token>/atropos` (or the
 * same without the token part and a bearer header) serves Atropos environments and trainers
 * unchanged. The Worker checks the token's engine, inflates gzip bodies, validates them as
 * FastAPI would (its 422 bodies) and serializes each scored group once; the engine's Durable
 * Object holds the state (engine/atropos-hub.ts). Answers of 1,000 bytes or more are gzipped
 * for clients that accept it, as Atropos's GZipMiddleware does.
 */
import type { Context, Hono } from "hono";
import type { z } from "zod";
import type { Env } from "../env";
import { envOf } from "../runs/context";
import { engineCaller } from "../http/engine-caller";
import { refusedCaller } from "../http/engine-routes";
import { errorResponse, replyResponse } from "../http/errors";
import { MAX_BODY_BYTES, readStream, routedBody } from "../http/body";
import { MAX_JSON_DEPTH, nestsDeeperThan, tooDeep } from "../http/validate";
import { parseRequestJson } from "../http/python-json";
import { AtroposConfig, AtroposEnvIdentifier, AtroposRegisterEnv, AtroposRegistration, AtroposScoredData, AtroposScoredDataList, UpdateAtroposConfigRequest } from "../protocol/atropos";
import * as Answers from "../protocol/atropos-answers";
import type { Reply } from "../engine/reply";
import { atroposOp, type AtroposCall, type AtroposPlainRoute, type AtroposSent } from "../engine/atropos-hub";
import { bodyMissing, invalidGzip, jsonInvalid, pydanticErrors, unprocessable } from "./fastapi";
import { groupsTooLarge, toGroup } from "./scored-json";
import { exactFreeForm } from "./free-form";

/** The most a gzip body may inflate to: several groups of long sequences, and well inside a Worker's memory. */
export const MAX_INFLATED_BYTES = 4 * MAX_BODY_BYTES;
/** Starlette's GZipMiddleware(minimum_size=1000). */
const GZIP_MINIMUM = 1000;

/** What a route answers with 200: JSON of a schema (protocol/atropos-answers.ts), or one of Atropos's plain texts. */
export type AtroposAnswerSpec = { json: z.ZodType } | { text: string };

export type AtroposRouteSpec = {
  method: "GET" | "POST";
  path: string;
  summary: string;
  /** The call it makes: the engine operation, so the roles, follow from it (atroposOp). */
  route: AtroposCall["route"];
  /** `query` names a field also read from the query string when the body is empty (a GET whose client cannot send a body). */
  body?: { schema: z.ZodType; model: "object" | "list"; query?: string };
  answer: AtroposAnswerSpec;
  /** Atropos's 500 ("Internal Server Error", plain text) where its handler raises: kept, since its clients retry on it. */
  raises?: true;
  /** A GET that changes the engine's state (Atropos's /batch takes a batch): not to be retried or cached. */
  changesState?: true;
  /** `text`: the body as JSON text, when it was read as JSON. */
  call: (input: unknown, text?: string) => AtroposCall | Response;
};

const none = (route: AtroposPlainRoute) => (): AtroposCall => ({ route });

/** The scored groups, or a 413 for more than one request may carry to the engine; `text` is the request's, for their free-form fields. */
function scored(groups: z.output<typeof AtroposScoredData>[], list: boolean, text: string | undefined): AtroposCall | Response {
  const exact = text === undefined ? null : exactFreeForm(text, groups);
  const out = groups.map((g, i) => toGroup(g, exact?.[i]));
  const why = groupsTooLarge(out);
  if (why !== null) return errorResponse(413, "payload_too_large", why);
  return { route: "scored_data", groups: out, list };
}

const ROOT = { summary: "Atropos's root: a greeting that says the API is up.", route: "root", answer: { json: Answers.AtroposRoot }, call: none("root") } as const;

export const ATROPOS_API: AtroposRouteSpec[] = [
  { method: "GET", path: "", ...ROOT },
  { method: "GET", path: "/", ...ROOT },
  {
    method: "POST",
    path: "/register",
    summary: "A trainer registers its run: batch size, token length, step and W&B names. Another registration while one holds keeps its settings and queue, as in Atropos.",
    route: "register",
    body: { schema: AtroposRegistration, model: "object" },
    answer: { json: Answers.AtroposRegistered },
    call: (b) => ({ route: "register", body: b as z.output<typeof AtroposRegistration> }),
  },
  { method: "GET", path: "/info", summary: "The registered batch size and token length (-1 each before a trainer registers).", route: "info", answer: { json: Answers.AtroposInfo }, call: none("info") },
  { method: "GET", path: "/wandb_info", summary: "The registered W&B group and project.", route: "wandb_info", answer: { json: Answers.AtroposWandbInfo }, call: none("wandb_info") },
  {
    method: "GET",
    path: "/batch",
    summary: "The trainer takes the next batch of scored groups (null while none is ready). Its first call starts the run for environments.",
    route: "batch",
    answer: { json: Answers.AtroposBatch },
    raises: true,
    changesState: true,
    call: none("batch"),
  },
  {
    method: "POST",
    path: "/register-env",
    summary: "An environment registers: its token length, name, weight and group size. Before the trainer's first batch it is told to wait.",
    route: "register_env",
    body: { schema: AtroposRegisterEnv, model: "object" },
    answer: { json: Answers.AtroposEnvRegistered },
    call: (b) => ({ route: "register_env", body: b as z.output<typeof AtroposRegisterEnv> }),
  },
  {
    method: "POST",
    path: "/disconnect-env",
    summary: "An environment leaves: it is marked disconnected, and its minimum share of batches no longer holds them back.",
    route: "disconnect_env",
    body: { schema: AtroposEnvIdentifier, model: "object" },
    answer: { json: Answers.AtroposEnvDisconnected },
    call: (b) => ({ route: "disconnect_env", body: b as { env_id: number } }),
  },
  {
    method: "POST",
    path: "/scored_data",
    summary: "An environment sends one scored group; a group smaller than its env's group size waits in a buffer for others.",
    route: "scored_data",
    body: { schema: AtroposScoredData, model: "object" },
    answer: { json: Answers.AtroposScoredReceived },
    raises: true,
    call: (b, text) => scored([b as z.output<typeof AtroposScoredData>], false, text),
  },
  {
    method: "POST",
    path: "/scored_data_list",
    summary: "An environment sends several scored groups at once.",
    route: "scored_data",
    body: { schema: AtroposScoredDataList, model: "list" },
    answer: { json: Answers.AtroposScoredListReceived },
    raises: true,
    call: (b, text) => scored(b as z.output<typeof AtroposScoredDataList>, true, text),
  },
  { method: "GET", path: "/status", summary: "The step and the queue's size, and what keeps queued groups from being taken (`stalls`).", route: "status", answer: { json: Answers.AtroposStatus }, call: none("status") },
  // A GET with a JSON body, as Atropos's BaseEnv sends it.
  {
    method: "GET",
    path: "/status-env",
    summary: "An environment's share of the queue and its weight. A GET with a JSON body, as Atropos's environments send it (or `?env_id=`).",
    route: "status_env",
    body: { schema: AtroposEnvIdentifier, model: "object", query: "env_id" },
    answer: { json: Answers.AtroposEnvStatus },
    raises: true,
    // Atropos keeps the largest group size it has seen queued for the env as its group size.
    changesState: true,
    call: (b) => ({ route: "status_env", body: b as { env_id: number } }),
  },
  { method: "GET", path: "/latest_example", summary: "The latest group queued, for a look at what environments send.", route: "latest_example", answer: { json: Answers.AtroposLatestExample }, call: none("latest_example") },
  {
    method: "GET",
    path: "/reset_data",
    summary: "The trainer drops its run's state: the queue, every group held, the batch size and the step (max_token_len and the latest example stay, as in Atropos).",
    route: "reset_data",
    answer: { text: Answers.ATROPOS_RESET_TEXT },
    changesState: true,
    call: none("reset_data"),
  },
  // The exchange's own: the queue's bounds.
  {
    method: "GET",
    path: "/config",
    summary:
      "The exchange's settings for this API: the most groups the engine holds (`max_groups`) and the most bytes of their JSON (`max_stored_bytes`, default 4 GiB, at most 6 GiB of the 10 GB a Durable Object stores, the rest left for the engine's other tables).",
    route: "config",
    answer: { json: AtroposConfig },
    call: none("config"),
  },
  {
    method: "POST",
    path: "/config",
    summary: "Changes the exchange's settings for this API: `max_groups` (1 to 10,000,000) and `max_stored_bytes` (4 MiB to 6 GiB); a value out of range is a 422 that changes nothing.",
    route: "configure",
    body: { schema: UpdateAtroposConfigRequest, model: "object" },
    answer: { json: AtroposConfig },
    call: (b) => ({ route: "configure", body: b as z.output<typeof UpdateAtroposConfigRequest> }),
  },
];

/** The body's bytes, inflated when it says it is gzip; a Response for a body that is too large or not gzip. */
async function bodyBytes(c: Context): Promise<Uint8Array | Response> {
  const request = c.req.raw;
  const raw = routedBody(c);
  if (!(request.headers.get("content-encoding") ?? "").toLowerCase().includes("gzip") || raw.byteLength === 0) return raw;
  try {
    const inflated = await readStream(new Blob([raw]).stream().pipeThrough(new DecompressionStream("gzip")), MAX_INFLATED_BYTES);
    return inflated ?? errorResponse(413, "payload_too_large", `The request body inflates to more than ${MAX_INFLATED_BYTES} bytes.`);
  } catch {
    return invalidGzip();
  }
}

/** The request's input as FastAPI reads it: JSON when the content type is JSON or absent, the text itself otherwise. */
async function readInput(c: Context, spec: NonNullable<AtroposRouteSpec["body"]>): Promise<{ ok: true; value: unknown; text?: string } | { ok: false; response: Response }> {
  const request = c.req.raw;
  const bytes = await bodyBytes(c);
  if (bytes instanceof Response) return { ok: false, response: bytes };
  const fromQuery = spec.query === undefined ? null : new URL(request.url).searchParams.get(spec.query);
  if (bytes.byteLength === 0 && fromQuery !== null) return validated(spec, { [spec.query!]: fromQuery });
  if (bytes.byteLength === 0) return { ok: false, response: bodyMissing() };
  const text = new TextDecoder().decode(bytes);
  const type = request.headers.get("content-type");
  let raw: unknown = text;
  if (type === null || /^application\/([\w.+-]*\+)?json\b/i.test(type.trim())) {
    if (nestsDeeperThan(text, MAX_JSON_DEPTH)) return { ok: false, response: unprocessable([{ type: "json_invalid", loc: ["body"], msg: tooDeep, input: {} }]) };
    try {
      // Python's NaN and ±Infinity too, as BaseEnv's json.dumps writes them: pyFloat then refuses them at their field (finite_number).
      raw = parseRequestJson(text);
    } catch (e) {
      return { ok: false, response: jsonInvalid(text, e) };
    }
    const checked = validated(spec, raw);
    return checked.ok ? { ...checked, text } : checked;
  }
  return validated(spec, raw);
}

function validated(spec: NonNullable<AtroposRouteSpec["body"]>, raw: unknown): { ok: true; value: unknown } | { ok: false; response: Response } {
  const parsed = spec.schema.safeParse(raw);
  if (!parsed.success) return { ok: false, response: unprocessable(pydanticErrors(parsed.error, raw, spec.model)) };
  return { ok: true, value: parsed.data };
}

/** The engine's answer as HTTP, gzipped when large (a streamed batch always is) and accepted. */
async function answer(c: Context, a: AtroposSent): Promise<Response> {
  if ("text" in a) return new Response(a.text, { status: a.status, headers: { "content-type": "text/plain; charset=utf-8" } });
  const headers: Record<string, string> = { "content-type": "application/json" };
  const gzip = (c.req.header("accept-encoding") ?? "").toLowerCase().includes("gzip");
  // The body is gzip already: the runtime must send it as it is (encodeBody "manual"), not compress it again.
  const gzipped = (body: BodyInit): Response => new Response(body, { headers: { ...headers, "content-encoding": "gzip", vary: "Accept-Encoding" }, encodeBody: "manual" });
  const compress = (body: ReadableStream<Uint8Array>): ReadableStream<Uint8Array> => body.pipeThrough(new CompressionStream("gzip"));
  if ("stream" in a) return gzip ? gzipped(compress(a.stream)) : new Response(a.stream, { headers });
  const bytes = new TextEncoder().encode(a.raw);
  if (bytes.byteLength < GZIP_MINIMUM || !gzip) return new Response(bytes, { headers });
  // Whole, with its length: small answers need no chunked transfer.
  return gzipped(await new Response(compress(new Blob([bytes]).stream())).arrayBuffer());
}

async function handle(c: Context, spec: AtroposRouteSpec): Promise<Response> {
  const who = await engineCaller(envOf(c), c.req.param("engine") ?? "", c.req.header("authorization"), c.req.url);
  if (!who.ok) return replyResponse(who);
  // Refused before the engine would check the caller: a bad token or role is answered first.
  const refused = async (res: Response): Promise<Response> => (await refusedCaller(envOf(c), who.body, atroposOp(spec.route))) ?? res;
  let input: unknown = undefined;
  let text: string | undefined;
  if (spec.body !== undefined) {
    const parsed = await readInput(c, spec.body);
    if (!parsed.ok) return refused(parsed.response);
    input = parsed.value;
    text = parsed.text;
  }
  const call = spec.call(input, text);
  if (call instanceof Response) return refused(call);
  const reply: Reply<AtroposSent> = await who.body.stub.atropos(who.body.caller, call);
  if (reply.ok) return answer(c, reply.body);
  return replyResponse(reply);
}

/** Registers Atropos's routes under `${prefix}/atropos` (token-in-path URLs route the same: http/path-token.ts). */
export function atroposRoutes<E extends { Bindings: Env }>(app: Hono<E>, prefix: string): void {
  for (const spec of ATROPOS_API) {
    const path = `${prefix}/atropos${spec.path}`;
    app.on(spec.method, path, (c) => handle(c, spec));
    // The path with a trailing slash is served as the route: Atropos (FastAPI, redirect_slashes)
    // answers it with a 307 to the route, which aiohttp and requests follow with the body, and
    // httpx does not. Only for routing: the document lists each route once, from ATROPOS_API.
    if (spec.path === "" || spec.path.endsWith("/")) continue;
    app.on(spec.method, `${path}/`, (c) => {
      // hono answers HEAD with a GET's route; unsafeHead refuses HEAD of a GET that changes state by its exact path only.
      if (c.req.raw.method === "HEAD" && spec.changesState === true) return c.notFound();
      return handle(c, spec);
    });
  }
}
