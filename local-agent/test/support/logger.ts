import type { Logger } from "../../src/log";

/** A logger that keeps its lines, so tests can assert what the agent told the operator. */
export class MemoryLogger implements Logger {
  readonly lines: string[] = [];
  info = (m: string): void => void this.lines.push(`info ${m}`);
  warn = (m: string): void => void this.lines.push(`warn ${m}`);
  error = (m: string): void => void this.lines.push(`error ${m}`);
  has(re: RegExp): boolean {
    return this.lines.some((l) => re.test(l));
  }
  /** Prints what was logged when a test fails (call from afterEach with the test's state). */
  dump(): string {
    return this.lines.join("\n");
  }
}
