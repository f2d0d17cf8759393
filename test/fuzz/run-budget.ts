/**
 * fc.assert under a time budget that says what it cut. fast-check's own `skipAllAfterTimeLimit`
 * skips each run past the limit as if its precondition failed and draws another in its place,
 * so a suite that reached the limit ended in "too many pre-condition failures" after thousands
 * of draws, a failure that names neither the limit nor the runs that did pass. Here a run that
 * would start past the deadline interrupts the check instead (as `fc.pre` would, with
 * interruptExecution): no run is cut off halfway, the runs that ran are counted, the ones never
 * started are reported with console.warn, and fewer than `minRuns` fail. A failure found before
 * the deadline is reported as fc.assert reports it; its shrinking stops at the deadline with the
 * smallest counterexample found so far.
 */
import fc from "fast-check";

export type Budget = {
  /** Milliseconds after which no new run starts. */
  limitMs: number;
  /** Fewer runs than this within the limit fail: the suite would have tested too little. */
  minRuns: number;
  now?: () => number;
};

export async function assertWithinBudget<T>(arbitrary: fc.Arbitrary<T>, predicate: (value: T) => Promise<void>, params: fc.Parameters<[T]>, budget: Budget): Promise<fc.RunDetails<[T]>> {
  const now = budget.now ?? Date.now;
  const deadline = now() + budget.limitMs;
  const property = fc.asyncProperty(arbitrary, async (value) => {
    if (now() >= deadline) throw new fc.PreconditionFailure(true);
    await predicate(value);
  });
  const details = await fc.check(property, params);
  // A failure of the property itself, not an interruption before any run passed.
  if (details.failed && details.counterexamplePath !== null) throw new Error(await fc.asyncDefaultReportMessage(details), { cause: details.errorInstance });
  const ran = details.numRuns;
  const notStarted = details.interrupted ? Math.max(0, (details.runConfiguration.numRuns ?? ran) - ran) : 0;
  const why = `${ran} runs ran in the time limit of ${budget.limitMs} ms and ${notStarted} were not started (seed ${details.seed})`;
  if (notStarted > 0) console.warn(`fuzz: ${why}`);
  if (ran < budget.minRuns) throw new Error(`fuzz: too few runs, at least ${budget.minRuns} must run: ${why}`);
  return details;
}
