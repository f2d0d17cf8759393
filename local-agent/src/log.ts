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

/**
 * Control characters but tab, and the line separators terminals and log viewers break on. A
 * message holds text from others (an operator's stop reason, an episode id, a runner's answer):
 * a newline in it would start a line that reads as an entry of the agent's own, timestamp and
 * level included, and an escape sequence would rewrite what a terminal shows.
 */
const UNSAFE = /[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]/g;
const escaped = (c: string): string => (c === "\n" ? "\\n" : c === "\r" ? "\\r" : `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);

/** Each message one line, with what others wrote into it escaped (UNSAFE). */
export function lineLogger(write: (line: string) => void, clock: Pick<Clock, "now">): Logger {
  const emit = (level: Level, message: string): void => write(`${new Date(clock.now()).toISOString()} ${level.padEnd(5)} ${message.replace(UNSAFE, escaped)}`);
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
