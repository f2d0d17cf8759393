/**
 * The agent's own note of a run's processes, in the run's directory (run.json), written as soon
 * as each process is spawned. The exchange has the same pids once the report reaches it; the
 * note covers an agent killed between spawning a process and reporting it, so a restarted
 * agent still finds every process it started.
 */
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { privateDir, writePrivateAtomic } from "../host-files";

const Journal = z.object({
  run_id: z.string(),
  closed: z.boolean(),
  processes: z.array(
    z.object({
      name: z.string(),
      pid: z.number().int().positive(),
      order: z.number().int(),
      /** Its start as /proc told it at the spawn (process-group.ts's processStartedAt): the pid is ours only while it matches. Absent without /proc and in older notes. */
      proc_started_at: z.number().optional(),
    }),
  ),
});
export type RunJournal = z.infer<typeof Journal>;

export const runDir = (runsDir: string, runId: string): string => join(runsDir, runId);

export function writeJournal(runsDir: string, journal: RunJournal): void {
  const dir = runDir(runsDir, journal.run_id);
  privateDir(dir);
  writePrivateAtomic(join(dir, "run.json"), JSON.stringify(journal));
}

export function readJournal(runsDir: string, runId: string): RunJournal | null {
  try {
    return Journal.parse(JSON.parse(readFileSync(join(runDir(runsDir, runId), "run.json"), "utf8")));
  } catch {
    return null;
  }
}

/** Runs whose journal is not closed: the agent may still have processes of them. */
export function openJournals(runsDir: string): RunJournal[] {
  let entries: string[];
  try {
    entries = readdirSync(runsDir);
  } catch {
    return [];
  }
  return entries.flatMap((id) => {
    const j = readJournal(runsDir, id);
    return j !== null && !j.closed ? [j] : [];
  });
}
