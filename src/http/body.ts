/**
 * Request bodies and their size limit. Large enough for a long workflow output; anything bigger
 * is refused before it is read (a declared length) or as soon as it passes the limit (a body
 * sent in chunks, without one).
 */
import { errorResponse } from "./errors";

/**
 * Bytes as sent, here and in the router's bodyLimit. A transfer limit only: D1 and Durable
 * Object storage hold 2,000,000 bytes per row, so what a body holds is checked against that
 * value by value where it is stored (protocol/limits.ts).
 */
export const MAX_BODY_BYTES = 4 * 1024 * 1024;

export const tooLarge = (): Response => errorResponse(413, "payload_too_large", `The request body exceeds ${MAX_BODY_BYTES} bytes.`);

/** The body as text, or null if it is larger than `max` bytes. */
export async function readBodyText(request: Request, max: number = MAX_BODY_BYTES): Promise<string | null> {
  const declared = request.headers.get("content-length");
  if (declared !== null && !request.headers.has("transfer-encoding")) {
    return Number.parseInt(declared, 10) > max ? null : request.text();
  }
  if (request.body === null) return "";
  const bytes = await readStream(request.body, max);
  return bytes === null ? null : new TextDecoder().decode(bytes);
}

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
