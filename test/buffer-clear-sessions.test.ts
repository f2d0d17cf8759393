/**
 * The ids of a clear_sessions command (engine/buffer-clear-sessions.ts) come in the one order the
 * buffer lists ids in, code point order (engine/code-point-order.ts), as its pulls list groups.
 */
import { describe, expect, it } from "vitest";
import { clearSessionsCommands } from "../src/engine/buffer-clear-sessions";

describe("clear_sessions commands", () => {
  it("list their session and group ids in code point order, also past U+FFFF", () => {
    const ids = ["\u{1F600}", "\uFF21", "b", "\uD7FF"];
    const [command, ...more] = clearSessionsCommands(
      ids.map((id) => ({ session: id, group: `g${id}` })),
      "stale_group",
    );
    expect(more).toEqual([]);
    expect(command).toEqual({ kind: "clear_sessions", session_ids: ["b", "\uD7FF", "\uFF21", "\u{1F600}"], group_ids: ["gb", "g\uD7FF", "g\uFF21", "g\u{1F600}"], reason: "stale_group" });
  });
});
