/**
 * Helpers for the training-runs tests: a RunsClient per role against the real Worker, a sample
 * catalog as the agent would report it, and the runs feature's clock.
 */
import type { z } from "zod";
import { RunsClient, RunsRefusal } from "../../src/client";
import { runsClock } from "../../src/runs/clock";
import type { CatalogReport } from "../../src/protocol/runs";
import type { Role } from "../../src/protocol/admin";
import { ADMIN_TOKEN, ORIGIN, workerFetch, type TestEngine } from "./harness";

export const runsAs = (e: TestEngine, role: Role | "admin"): RunsClient =>
  new RunsClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: role === "admin" ? ADMIN_TOKEN : e.tokens[role], fetch: workerFetch });

export const runsViaUrl = (e: TestEngine, role: Role): RunsClient => new RunsClient({ baseUrl: `${ORIGIN}/e/${e.name}/t/${e.tokens[role]}`, fetch: workerFetch });

/** Sets the runs clock to a fixed time; returns a setter to move it. */
export function fixRunsClock(start = Date.UTC(2026, 10, 30, 12, 0, 0)): { t: number; advance(ms: number): void } {
  const clock = {
    t: start,
    advance(ms: number) {
      clock.t += ms;
    },
  };
  runsClock.now = () => clock.t;
  return clock;
}

export const GSM8K_FIELDS = [
  { name: "group_size", type: "int", default: 16, description: "Completions per prompt" },
  { name: "max_token_length", type: "int", default: 2048, description: "Longest sequence" },
  { name: "tokenizer_name", type: "str", default: "NousResearch/DeepHermes-3-Llama-3-3B-Preview", description: "" },
  { name: "temperature", type: "float", default: 1.0, description: "Sampling temperature" },
  { name: "use_wandb", type: "bool", default: true, description: "" },
  { name: "stop_words", type: "Optional[List[str]]", default: null, description: "" },
  { name: "split", type: "Literal['train', 'test']", default: "train", description: "Dataset split" },
];

export function sampleCatalog(overrides: Partial<z.input<typeof CatalogReport>> = {}): z.input<typeof CatalogReport> {
  return {
    agent_id: "gpu-host-1",
    directories: ["/opt/envs"],
    environments: [
      {
        name: "gsm8k",
        class_name: "GSM8kEnv",
        file_path: "/opt/envs/gsm8k_server.py",
        description: "Grade-school math with a numeric verifier.",
        config_class: "GSM8kConfig",
        fields: GSM8K_FIELDS,
        fields_source: "import",
      },
      {
        name: "countdown",
        class_name: "CountdownEnv",
        file_path: "/opt/envs/countdown.py",
        description: "Reach a target number.",
        fields: null,
        fields_error: "ModuleNotFoundError: No module named 'reasoning_gym'",
      },
    ],
    problems: [{ file_path: "/opt/envs/broken.py", error: "SyntaxError: invalid syntax (line 3)" }],
    ...overrides,
  };
}

/** Runs `fn` and returns the RunsRefusal it throws (fails the test if it does not). */
export async function refusal(fn: () => Promise<unknown>): Promise<RunsRefusal> {
  try {
    await fn();
  } catch (e) {
    if (e instanceof RunsRefusal) return e;
    throw e;
  }
  throw new Error("expected the exchange to refuse");
}
