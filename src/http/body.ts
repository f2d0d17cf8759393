/**
 * Request bodies and their size limit. Large enough for a long workflow output; anything bigger
 * is refused before it is read (a declared length) or as soon as it passes the limit (every
 * body is read against it, whatever its Content-Length says).
 */
import type { Context, MiddlewareHandler } from "hono";
import { MAX_MEDIA_UPLOAD_BODY_BYTES, MAX_REQUEST_BODY_BYTES, utf8Bytes } from "../protocol/limits";
import { errorResponse } from "./errors";
import { routingPath } from "./path-token";

/**
 * Bytes as sent, here and in the router's bodyLimit. A transfer limit only: D1 and Durable
 * Object storage hold 2,000,000 bytes per row, so what a body holds is checked against that
 * value by value where it is stored (protocol/limits.ts).
 */
export const MAX_BODY_BYTES = MAX_REQUEST_BODY_BYTES;

export const tooLarge = (max: number = MAX_BODY_BYTES): Response => errorResponse(413, "payload_too_large", `The request body exceeds ${max} bytes.`);

/** The gateway's media uploads (ledger/api.ts), whose bodies are one screenshot each: the one route with a larger limit. */
const MEDIA_UPLOAD = /^\/e\/[^/]+\/agent\/media\/[^/]+$/;

/**
 * The Content-Length as a number when it is one (digits only), else null. "abc" parses to NaN
 * and "12abc" to 12, and neither says anything true about the body.
 */
function declaredLength(request: Request): number | null {
  if (request.headers.has("transfer-encoding")) return null;
  const declared = request.headers.get("content-length");
  return declared !== null && /^[0-9]+$/.test(declared) ? Number(declared) : null;
}

/**
 * The body's bytes, or null if it is larger than `max`. A declared length over `max` is refused
 * unread. A body without a declared length (chunked, or a length that is no number) is read
 * against `max` and cancelled as soon as it passes it. One with a declared length is read whole
 * and then checked: a request handed to the Worker inside workerd (a service binding, a test)
 * may understate its length, one off the wire may not.
 */
export async function readBodyBytes(request: Request, max: number = MAX_BODY_BYTES): Promise<Uint8Array | null> {
  const declared = declaredLength(request);
  if (declared !== null && declared > max) return null;
  if (request.body === null) return new Uint8Array(0);
  if (declared !== null) {
    const bytes = new Uint8Array(await request.arrayBuffer());
    return bytes.byteLength > max ? null : bytes;
  }
  return readStream(request.body, max);
}

/**
 * The body as text, or null if it is larger than `max` bytes. With a declared length the body
 * is read whole, natively: off the wire it is as long as it says (HTTP's framing), and reading
 * it in chunks from JS cost claims, ends and relayed calls 0.1-0.2 ms each (`bench:ab --ops`).
 * Only a request made inside workerd can understate its length; it is still refused once read.
 */
export async function readBodyText(request: Request, max: number = MAX_BODY_BYTES): Promise<string | null> {
  const declared = declaredLength(request);
  if (declared !== null && declared > max) return null;
  if (declared !== null) {
    const text = await request.text();
    // A UTF-16 unit is at most 3 bytes of UTF-8: most bodies need no count.
    return text.length * 3 <= max || utf8Bytes(text) <= max ? text : null;
  }
  if (request.body === null) return "";
  const bytes = await readStream(request.body, max);
  return bytes === null ? null : new TextDecoder().decode(bytes);
}

/** Bodies the router's routes serve, as limitBody read them: a request's body can be read once. */
const routedBodies = new WeakMap<Request, Uint8Array>();

/**
 * The router's body limit: hono's bodyLimit trusts any Content-Length it can parse (a NaN
 * passes), so every body the router's routes will read is read here against the limit, as the
 * engine API's are, and the routes take it from `routedBody`. The engine API's and the relay's
 * bodies, served before the router, are read by their own handlers.
 */
export const limitBody: MiddlewareHandler = async (c, next) => {
  const request = c.req.raw;
  if (request.body === null) return next();
  // A media upload's larger body is read by its route once the caller is checked (routedBodyChecked):
  // no one without a token makes the Worker hold 12 MiB.
  if (isMediaUpload(request)) return next();
  const bytes = await readBodyBytes(request);
  if (bytes === null) return tooLarge();
  routedBodies.set(request, bytes);
  await next();
};

/** A media upload (ledger/api.ts), by the path the router routes by: a token in the path (/e/<engine>/t/<token>/...) taken out. */
const isMediaUpload = (request: Request): boolean => request.method === "PUT" && MEDIA_UPLOAD.test(routingPath(request));

/** The body of a request the router serves, as limitBody read it (empty when it had none). */
export function routedBody(c: Context): Uint8Array {
  return routedBodies.get(c.req.raw) ?? new Uint8Array(0);
}

/**
 * The body as text, for a route that checked its caller first: as limitBody read it, or a media
 * upload's, read now against MAX_MEDIA_UPLOAD_BODY_BYTES; null when it is larger than that.
 */
export async function routedBodyChecked(c: Context): Promise<string | null> {
  const request = c.req.raw;
  if (routedBodies.has(request) || request.body === null || !isMediaUpload(request)) return routedBodyText(c);
  const bytes = await readBodyBytes(request, MAX_MEDIA_UPLOAD_BODY_BYTES);
  if (bytes === null) return null;
  routedBodies.set(request, bytes);
  return routedBodyText(c);
}

/** The same body as text. */
export const routedBodyText = (c: Context): string => new TextDecoder().decode(routedBody(c));

/** A stream's bytes, or null (the stream cancelled) as soon as they pass `max`. */
export async function readStream(stream: ReadableStream<Uint8Array>, max: number): Promise<Uint8Array | null> {
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > max) {
      await reader.cancel();
      return null;
    }
    chunks.push(value);
  }
  const all = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.byteLength;
  }
  return all;
}
