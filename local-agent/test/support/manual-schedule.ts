import type { Schedule } from "../../src/coalescer";

/** A schedule the test fires by hand: a coalescing window closes when the test says, not by the clock. */
export function manualSchedule(): { schedule: Schedule; fire(): void; armed: () => number } {
  let pending: Array<() => void> = [];
  return {
    schedule: (fn) => {
      pending.push(fn);
      return () => (pending = pending.filter((f) => f !== fn));
    },
    fire: () => {
      const fns = pending;
      pending = [];
      for (const f of fns) f();
    },
    armed: () => pending.length,
  };
}
