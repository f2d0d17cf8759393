/**
 * Whether a D1 error is a unique index refusing a row on `column` ("table.column"), as SQLite
 * words it, in the error or its cause (drizzle wraps D1's). Told apart from D1 failing: only the
 * conflict is an answer about the data; anything else is an internal error.
 */
export function isUniqueConflict(err: unknown, column: string): boolean {
  const text = err instanceof Error ? `${err.message} ${err.cause instanceof Error ? err.cause.message : ""}` : String(err);
  return text.includes(`UNIQUE constraint failed: ${column}`);
}
