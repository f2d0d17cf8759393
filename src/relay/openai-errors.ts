import type { OpenAIError } from "../protocol/relay";

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
