/**
 * Rollout workers and a slime-style trainer through the real buffer API: groups of `groupSize`
 * sessions of two steps each, some complete and some with one session still open, a batch sent
 * twice (duplicate rows), a pull of some ready groups, and a late row for a pulled group. The
 * tests then compare the page with what /health reports, never with these numbers.
 */
import type { z } from "zod";
import type { StepRow } from "../../src/protocol/buffer";
import type { TestEngine } from "./exchange";

type Row = z.input<typeof StepRow>;

export type BufferScript = { groupSize: number; complete: number; open: number; pull: number };

/** Both steps of one session; the second ends it (with the session's reward) when `completed`. */
export function sessionRows(group: string, session: number, completed: boolean): Row[] {
  const session_id = `${group}-s${session}`;
  const row = (step_index: number, done: boolean): Row => ({
    session_id,
    group_id: group,
    step_index,
    messages: [{ role: "user", content: `solve ${group} #${session}, step ${step_index}` }],
    response: `answer ${step_index}`,
    reward: done ? (session % 3) / 2 : 0,
    is_session_completed: done,
    weight_version: 1,
  });
  return [row(0, false), row(1, completed)];
}

/** Posts rows in batches the API accepts (at most 1000). */
export async function postRows(engine: TestEngine, rows: readonly Row[]): Promise<void> {
  for (let i = 0; i < rows.length; i += 1000) await engine.as("client").postSteps({ steps: rows.slice(i, i + 1000) });
}

const groupRows = (group: string, size: number, open: boolean): Row[] =>
  Array.from({ length: size }, (_, s) => sessionRows(group, s, !(open && s === size - 1))).flat();

export async function scriptBuffer(engine: TestEngine, opts: BufferScript): Promise<void> {
  await engine.as("operator").configureBuffer({ group_size: opts.groupSize, ttl_seconds: 3600 });
  const complete = Array.from({ length: opts.complete }, (_, g) => groupRows(`done-${g}`, opts.groupSize, false)).flat();
  const open = Array.from({ length: opts.open }, (_, g) => groupRows(`open-${g}`, opts.groupSize, true)).flat();
  await postRows(engine, [...complete, ...open]);
  // A worker that retries a batch it did not hear back about: stored once, counted as duplicates.
  await postRows(engine, sessionRows("done-0", 0, true));
  if (opts.pull > 0) await engine.as("trainer").getRolloutData({ max_groups: opts.pull });
  // A straggler for a group the trainer already has: ignored and counted as late.
  await postRows(engine, [{ ...sessionRows("done-0", 0, true)[0]!, session_id: "done-0-straggler" }]);
}

/** The open session of group `g` ends with a third step (rows are keyed by session and step), so the group becomes ready. */
export const completeOpenGroup = (engine: TestEngine, g: number, groupSize: number): Promise<void> =>
  postRows(engine, [{ ...sessionRows(`open-${g}`, groupSize - 1, true)[1]!, step_index: 2 }]);
