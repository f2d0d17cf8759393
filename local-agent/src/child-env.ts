/**
 * The environment of every process the agent starts (the trainer, a run's processes, rollout
 * workers, the environment scanner, inference tests): the agent's own, less its secrets. The
 * trainer token lets its holder do anything to the engine, and these processes run code the
 * agent does not control (environments, trainers), whose environment shows up in their crash
 * dumps, their logs and, to the same user, /proc/<pid>/environ.
 */
import { OPTIONS, OPTION_KEYS } from "./options";

/** The variables of the agent's secret settings (ROLLOUT_TRAINER_TOKEN). */
export const AGENT_SECRET_ENV: readonly string[] = OPTION_KEYS.flatMap((k) => {
  const spec = OPTIONS[k];
  return "secret" in spec && spec.secret ? [spec.env] : [];
});

/** The agent's environment without its secrets, then `extra` (what the caller sets on purpose). */
export function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of AGENT_SECRET_ENV) delete env[name];
  return { ...env, ...extra };
}
