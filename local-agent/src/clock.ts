/**
 * Time as a dependency. The agent's waits (backoff, heartbeats, progress lines) go through a
 * Clock so tests can drive them with a manual clock instead of sleeping.
 */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
  /** Resolves after `ms`, or early (without throwing) when `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/** The longest wait a timer keeps: Node fires one asked for more (24.8 days) at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * `ms` as a timer takes it: whole, from 0 to its longest wait. A wait that long is none; a
 * fraction of a millisecond makes AbortSignal.timeout throw.
 */
export const timerMs = (ms: number): number => Math.min(MAX_TIMER_MS, Math.max(0, Math.ceil(ms)));

export const realClock: Clock = {
  now: () => Date.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve) => {
      if (signal?.aborted) return resolve();
      const done = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, timerMs(ms));
      signal?.addEventListener("abort", done, { once: true });
    }),
};
