/**
 * The rollout workers' command template (rolloutCommand). It is split and checked with the
 * trainer's template code, but has its own placeholders: what a start_rollout command carries
 * and where the workers post their steps.
 */
import { expandCommand, splitCommand } from "../command-template";

export const ROLLOUT_PLACEHOLDERS = ["job_session", "group_size", "restart_training", "engine", "engine_url", "facade_url"] as const;
export type RolloutPlaceholder = (typeof ROLLOUT_PLACEHOLDERS)[number];

/** Splits a template (or copies an argv array) and checks its placeholders, so a typo fails at startup; throws TemplateError. */
export function parseRolloutCommand(value: string | readonly string[]): string[] {
  const words = typeof value === "string" ? splitCommand(value) : [...value];
  expandCommand(words, Object.fromEntries(ROLLOUT_PLACEHOLDERS.map((k) => [k, ""])));
  return words;
}
