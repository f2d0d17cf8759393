/** Rows a rollout worker posts to the buffer (`POST /steps`), for tests of the buffer. */
import type { z } from "zod";
import type { StepRow } from "../../src/protocol/buffer";

export type Row = z.input<typeof StepRow>;

/** Step `index` of `session` in `group`, reward 1, with messages and a response that name it. */
export const stepRow = (session: string, group: string, index: number, done: boolean): Row => ({
  session_id: session,
  group_id: group,
  step_index: index,
  messages: [{ role: "user", content: `${session} step ${index}` }],
  response: `answer ${session}/${index}`,
  reward: 1,
  is_session_completed: done,
});
