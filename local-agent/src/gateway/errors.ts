/**
 * OpenAI-style error answers from the gateway. The Worker passes a gateway's non-2xx answer
 * through to the client when it is an OpenAI error object, so the client's OpenAI library
 * classifies it (and retries 5xx) as it would an error from OpenAI itself.
 */
import type { ServerResponse } from "node:http";
import { openaiErrorBody } from "../../../src/relay/openai-errors";

export function sendError(res: ServerResponse, status: number, message: string, code: string | null): void {
  if (res.headersSent) {
    // A stream is already open: the status line is gone, so the error becomes its last event.
    if (!res.writableEnded) res.end(`data: ${JSON.stringify(openaiErrorBody(status, message, code))}\n\n`);
    return;
  }
  const body = JSON.stringify(openaiErrorBody(status, message, code));
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) }).end(body);
}

/** What a failed call's answer is recorded with (the ledger's CallTap), when the call is recorded. */
export type FailureTap = { failed(status: number, code: string | null, message: string): void };

/** sendError, noting the failure on the call's tap first. */
export function sendFailure(res: ServerResponse, tap: FailureTap | null, status: number, message: string, code: string | null): void {
  tap?.failed(status, code, message);
  sendError(res, status, message, code);
}

export function sendJson(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) }).end(text);
}

/** An object with an `error` object carrying a message: what OpenAI-compatible servers send. */
export function isOpenAIErrorText(text: string): boolean {
  try {
    const v: unknown = JSON.parse(text);
    if (typeof v !== "object" || v === null) return false;
    const err: unknown = (v as { error?: unknown }).error;
    return typeof err === "object" && err !== null && typeof (err as { message?: unknown }).message === "string";
  } catch {
    return false;
  }
}
