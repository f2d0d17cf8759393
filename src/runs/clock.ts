/**
 * The runs feature's clock. Run times (created, started, running time) come from here, so the
 * Worker tests set it instead of waiting; everything else uses the real time.
 */
export const runsClock = { now: (): number => Date.now() };
