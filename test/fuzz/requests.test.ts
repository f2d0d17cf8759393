/**
 * Property-based fuzzing of the whole exchange, inside workerd against real D1 and Durable
 * Objects: short sequences of requests generated from /openapi.json (arbitraries.ts) for every
 * route, role and token form, with broken bodies, tokens, paths and methods, sent to an engine
 * that has something in every corner (world.ts). Each answer must be a 2xx or 4xx that matches
 * what the document says for its route and status (oracle.ts); after it, every read route must
 * still answer as documented; and a refusal must leave everything those routes, the admin's
 * lists, the engine's queues and D1 show exactly as it was.
 *
 * Each run gets a world that looks new, so a failure replays by its seed alone. On failure
 * fast-check prints the counterexample, its `seed` and its `path`; replay it (and only it) with
 *   FUZZ_SEED=<seed> FUZZ_PATH=<path> npx vitest run --project worker test/fuzz/
 * and search wider with FUZZ_RUNS=<n> (RUNS below is sized for CI on a loaded 2-core machine), or
 * deeper in a few routes with FUZZ_ONLY=<part of a target's key>, e.g. `FUZZ_ONLY=/trajectories`
 * (a target's key is its method and path, as the counterexample's `target` shows).
 */
import { env } from "cloudflare:workers";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runsClock } from "../../src/runs/clock";
import { createEngine, ORIGIN, workerFetch, type TestEngine } from "../support/harness";
import { fixRunsClock } from "../support/runs";
import { targets, type FuzzRequest, type Target } from "./arbitraries";
import type { Doc } from "./document";
import { judge, judgeView } from "./oracle";
import { assertWithinBudget } from "./run-budget";
import { buildWorld, readRoutes, send, snapshot, type Snapshot, type World } from "./world";

const RUNS = 50;
/** Fewer runs than this within the time limit fail the suite, rather than pass having tested little. */
const MIN_RUNS = 10;
const numRuns = Number(env.FUZZ_RUNS) || RUNS;
const replay = env.FUZZ_SEED !== "" ? { seed: Number(env.FUZZ_SEED), ...(env.FUZZ_PATH !== "" ? { path: env.FUZZ_PATH } : {}) } : {};

let doc: Doc;
let foreign: TestEngine;
const realNow = runsClock.now;

beforeAll(async () => {
  const res = await workerFetch(`${ORIGIN}/openapi.json`);
  doc = (await res.json()) as Doc;
  foreign = await createEngine("fuzz-foreign");
  // Run times come from this clock: fixed, so the views of a run read the same twice.
  fixRunsClock();
});

afterAll(() => {
  runsClock.now = realNow;
});

/** How often each kind of target is picked: the documented routes and the relay most. */
const weight = (t: Target): number => (t.key.startsWith("wrong method") || t.key.startsWith("head ") ? 1 : 4);

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));

describe("fuzzing every route from the OpenAPI document", () => {
  it("answers each request with a documented 2xx or 4xx, and a refusal changes nothing", { timeout: 600_000 }, async () => {
    const all = targets(doc);
    const byKey = new Map(all.map((t) => [t.key, t]));
    const reads = readRoutes(doc);
    const aimed = all.filter((t) => t.key.includes(env.FUZZ_ONLY));
    if (aimed.length === 0) throw new Error(`FUZZ_ONLY=${env.FUZZ_ONLY} names no target`);
    const request = fc.oneof(...aimed.map((t) => ({ weight: weight(t), arbitrary: t.arbitrary })));
    // A world whose snapshot at the end of a run equals its first one looks exactly as a new one
    // would, so the next run may have it: building one costs as much as a few requests.
    let spare: { world: World; seen: Snapshot } | undefined;
    await assertWithinBudget(
      fc.array(request, { minLength: 1, maxLength: 5 }),
      async (requests: FuzzRequest[]) => {
        const reused = spare;
        spare = undefined;
        const world = reused?.world ?? (await buildWorld(foreign));
        const look = (when: string) =>
          snapshot(world, reads, (op, view) => {
            try {
              judgeView(doc, op, view);
            } catch (e) {
              throw new Error(`${when}: ${message(e)}`);
            }
          });
        const first = reused?.seen ?? (await look("in the new world"));
        let before = first;
        for (const [i, req] of requests.entries()) {
          const answer = await send(world, req);
          const where = `request ${i} (${req.method} ${req.target}, ${req.mutation}) answered ${answer.status}`;
          let refused: boolean;
          try {
            refused = judge(doc, byKey.get(req.target) as Target, req.method, answer);
          } catch (e) {
            throw new Error(`${where}: ${message(e)}`);
          }
          // Deleting the world's engine ends the run: its views are gone, as they should be.
          if (answer.status < 300 && req.method === "DELETE" && req.path === "/admin/engines/{name}") return;
          const after = await look(`after ${where}`);
          if (refused) expect(after, `${where}, a refusal, yet the engine's state changed: ${answer.text.slice(0, 300)}`).toEqual(before);
          before = after;
        }
        if (JSON.stringify(before) === JSON.stringify(first)) spare = { world, seen: before };
      },
      { numRuns, ...replay },
      // No run starts after five minutes: the runs left are reported, and fewer than MIN_RUNS
      // fail the test (a replay runs one). Shrinking a failure re-runs it many times over: it
      // stops there too, with the smallest failing sequence found so far (its seed and path
      // replay it).
      { limitMs: 300_000, minRuns: "path" in replay ? 1 : Math.min(MIN_RUNS, numRuns) },
    );
  });
});
