import type { Clock } from "../../src/clock";

/** A clock that moves only when the test says so; sleepers wake as time passes their deadline. */
export class ManualClock implements Clock {
  private t: number;
  private sleepers: Array<{ at: number; wake: () => void }> = [];
  constructor(start = Date.UTC(2026, 10, 30)) {
    this.t = start;
  }
  now(): number {
    return this.t;
  }
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const entry = { at: this.t + ms, wake: resolve };
      this.sleepers.push(entry);
      signal?.addEventListener("abort", () => {
        this.sleepers = this.sleepers.filter((s) => s !== entry);
        resolve();
      }, { once: true });
    });
  }
  /** How many sleeps are pending, and the shortest one. */
  get pending(): number[] {
    return this.sleepers.map((s) => s.at - this.t).sort((a, b) => a - b);
  }
  async advance(ms: number): Promise<void> {
    this.t += ms;
    const due = this.sleepers.filter((s) => s.at <= this.t);
    this.sleepers = this.sleepers.filter((s) => s.at > this.t);
    for (const s of due) s.wake();
    // Let the woken code run up to its next await.
    for (let i = 0; i < 20; i++) await Promise.resolve();
  }
}
