/** Process-group liveness against real processes, including a group left holding only a zombie. */
import { spawn } from "node:child_process";
import { afterEach, describe, expect, it } from "vitest";
import { groupAlive } from "../../src/runs/process-group";
import { processState, waitUntil } from "../support/wait";

// The leader forks a keeper, which forks a child that exits at once, moves itself to a group of
// its own and never reaps that child: the leader's group is left with nothing but the zombie.
const LEAVE_A_ZOMBIE = `
import os, sys, time
keeper = os.fork()
if keeper == 0:
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.setpgid(0, 0)
    print(child, os.getpid(), flush=True)
    time.sleep(60)
    os._exit(0)
time.sleep(0.5)
`;

const cleanup: number[] = [];
afterEach(() => {
  for (const pid of cleanup.splice(0)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
});


describe("groupAlive", () => {
  it("is true while a member runs and false once the group holds only a zombie nobody reaps", async () => {
    const leader = spawn("python3", ["-c", LEAVE_A_ZOMBIE], { detached: true, stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    leader.stdout.on("data", (b: Buffer) => (out += b.toString()));
    const pgid = leader.pid as number;
    expect(groupAlive(pgid)).toBe(true);
    const [child, keeper] = (await waitUntil(() => /^(\d+) (\d+)\n/.exec(out), "the keeper's pids")).slice(1).map(Number) as [number, number];
    cleanup.push(keeper);
    await new Promise<void>((r) => leader.on("exit", () => r()));
    // The leader is gone and reaped; its group still "exists" to kill(2) through the zombie.
    await waitUntil(() => processState(child) === "Z", "the child to be a zombie");
    expect(() => process.kill(-pgid, 0)).not.toThrow();
    expect(groupAlive(pgid)).toBe(false);
    // The keeper, in a group of its own, is unaffected.
    expect(groupAlive(keeper)).toBe(true);
  });

  it("is false for a group that never existed", () => {
    expect(groupAlive(2 ** 22 - 3)).toBe(false);
  });
});
