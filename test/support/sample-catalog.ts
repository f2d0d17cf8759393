/**
 * A catalog as a GPU host's agent reports it: one environment whose config fields were read,
 * one whose module could not be imported, and a file that failed to parse. Plain data, so the
 * Worker tests (workerd) and the end-to-end tests (Node) share it.
 */
import type { z } from "zod";
import type { CatalogReport } from "../../src/protocol/runs";

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

