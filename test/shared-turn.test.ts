import { describe, expect, it } from "vitest";
import { SharedTurn } from "../src/engine/shared-turn";

describe("SharedTurn", () => {
  it("releases every waiter of a turn together, in the order they came, and not before the turn", async () => {
    const turn = new SharedTurn();
    const seen: string[] = [];
    const waits = ["a", "b", "c"].map((name) => turn.next().then(() => void seen.push(name)));
    await Promise.resolve();
    expect(seen).toEqual([]);
    await Promise.all(waits);
    expect(seen).toEqual(["a", "b", "c"]);
  });

  it("puts a waiter that comes while a turn is being released into the next turn", async () => {
    const turn = new SharedTurn();
    const seen: string[] = [];
    const first = turn.next().then(async () => {
      seen.push("first");
      const later = turn.next().then(() => void seen.push("later"));
      await Promise.resolve();
      seen.push("first, after a microtask");
      return later;
    });
    const second = turn.next().then(() => void seen.push("second"));
    await Promise.all([first, second]);
    expect(seen).toEqual(["first", "second", "first, after a microtask", "later"]);
  });
});
