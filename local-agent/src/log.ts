/**
 * The agent's own log: one plain-words line per event, with a timestamp and a level, so an
 * operator reading a terminal or a file can follow what the agent did and why.
 */
import type { Clock } from "./clock";

export type Level = "info" | "warn" | "error";

export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

export function lineLogger(write: (line: string) => void, clock: Pick<Clock, "now">): Logger {
  const emit = (level: Level, message: string): void => write(`${new Date(clock.now()).toISOString()} ${level.padEnd(5)} ${message}`);
  return {
    info: (m) => emit("info", m),
    warn: (m) => emit("warn", m),
    error: (m) => emit("error", m),
  };
}

/** For callers that want no output. */
export const silentLogger: Logger = { info: () => {}, warn: () => {}, error: () => {} };

/** An error's message without a stack: log lines stay one line. */
export function describeError(err: unknown): string {
  if (err instanceof Error) {
    const cause = err.cause instanceof Error ? ` (${err.cause.message})` : "";
    return `${err.message}${cause}`;
  }
  return String(err);
}
