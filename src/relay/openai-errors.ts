import { OpenAIError } from "../protocol/relay";

/** OpenAI's error types by status, so OpenAI clients classify (and retry) our errors as theirs. */
export function errorType(status: number): string {
  if (status === 401) return "authentication_error";
  if (status === 403) return "permission_error";
  if (status === 404) return "not_found_error";
  if (status === 429) return "rate_limit_error";
  if (status >= 500) return "api_error";
  return "invalid_request_error";
}

export function openaiErrorBody(status: number, message: string, code: string | null = null): OpenAIError {
  return { error: { message, type: errorType(status), param: null, code } };
}

export function openaiErrorResponse(status: number, message: string, code: string | null = null): Response {
  return Response.json(openaiErrorBody(status, message, code), { status });
}

/**
 * Whether a status from behind the exchange is a refusal there: the gateway refusing the
 * exchange's signature (a host clock off by minutes) or the upstream the trainer's key. The
 * client's own key was good (the Worker checked it), and a 401 would tell an OpenAI client it
 * was not, which it does not retry: it gets refusedBehindBody, a 502, the deployment's fault.
 */
export const refusedBehind = (status: number): boolean => status === 401 || status === 403;

export function refusedBehindBody(status: number, text: string): OpenAIError {
  const err = openaiErrorIn(text);
  const said = err?.error.message ?? text.slice(0, 300);
  return err?.error.code === "invalid_signature"
    ? openaiErrorBody(502, `The inference gateway refused the exchange's signature (${status}): ${said}`, "gateway_refused")
    : openaiErrorBody(502, `The inference upstream refused the trainer's credentials (${status}): ${said}`, "upstream_refused");
}

/** The OpenAI error `text` holds, or null when it holds none. */
export function openaiErrorIn(text: string): OpenAIError | null {
  try {
    const parsed = OpenAIError.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}
