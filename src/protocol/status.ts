import { z } from "zod";

/** The engine status strings AgentJet's trainer and SwarmClient exchange, verbatim. */
export const ENGINE_STATUSES = [
  "ENGINE.OFFLINE",
  "ENGINE.BOOTING",
  "ENGINE.ROLLING",
  "ENGINE.ROLLING_POST",
  "ENGINE.WEIGHT_SYNCING",
  "ENGINE.WEIGHT_EXPORTING",
] as const;

export const EngineStatus = z.enum(ENGINE_STATUSES, {
  error: (issue) => `unknown engine status ${JSON.stringify(issue.input)}; expected one of ${ENGINE_STATUSES.join(", ")}`,
});
export type EngineStatus = z.infer<typeof EngineStatus>;

/** Statuses in which claimed episodes may still be finished. */
export const ROLLING_STATUSES: readonly EngineStatus[] = ["ENGINE.ROLLING", "ENGINE.ROLLING_POST"];

export const isRolling = (s: EngineStatus): boolean => ROLLING_STATUSES.includes(s);
