/**
 * The environment catalog and run configuration, through the real Worker against real D1 and
 * the engine's Durable Object (which checks every token): discovery reports, selection,
 * locked fields, typed edits, the rendered YAML, and every refusal changing nothing.
 */
import { beforeEach, describe, expect, it } from "vitest";
import { createEngine, raw, type TestEngine } from "./support/harness";
import { GSM8K_FIELDS, refusal, runsAs, runsViaUrl, sampleCatalog } from "./support/runs";

let e: TestEngine;

beforeEach(async () => {
  e = await createEngine("runs-cfg");
});

const LOCKS = {
  set: [
    { section: "env" as const, name: "max_token_length", value: 8192 },
    { section: "env" as const, name: "tokenizer_name", value: "Qwen/Qwen3-8B" },
    { section: "openai" as const, name: "base_url", value: "http://localhost:8001/v1" },
    { section: "openai" as const, name: "model_name", value: "Qwen/Qwen3-8B" },
    { section: "trainer" as const, name: "learning_rate", value: 0.00004 },
    { section: "trainer" as const, name: "tiny_lr", value: 1e-7 },
  ],
};

async function withCatalog(): Promise<void> {
  await runsAs(e, "trainer").reportCatalog(sampleCatalog());
}

describe("environment catalog", () => {
  it("is empty until the agent reports; selecting then says why nothing is there", async () => {
    const cat = await runsAs(e, "viewer").listEnvironments();
    expect(cat).toMatchObject({ environments: [], count: 0, problems: [], scanned_at: null, selected: null });
    const r = await refusal(() => runsAs(e, "operator").selectEnvironment({ name: "gsm8k" }));
    expect(r.status).toBe(404);
    expect(r.code).toBe("unknown_environment");
    expect(r.detail).toMatch(/catalog is empty.*scan/);
    expect(r.hints).toEqual({ name: "gsm8k", available: [] });
  });

  it("stores the agent's report: environments, fields, files that failed to parse", async () => {
    await withCatalog();
    const cat = await runsAs(e, "viewer").listEnvironments();
    expect(cat.count).toBe(2);
    expect(cat.environments.map((x) => x.name)).toEqual(["countdown", "gsm8k"]);
    expect(cat.environments[1]).toMatchObject({ class_name: "GSM8kEnv", config_class: "GSM8kConfig", fields_source: "import", fields: GSM8K_FIELDS });
    expect(cat.environments[0]).toMatchObject({ fields: null, fields_error: expect.stringMatching(/reasoning_gym/) });
    expect(cat.problems).toEqual([{ file_path: "/opt/envs/broken.py", error: "SyntaxError: invalid syntax (line 3)" }]);
    expect(cat.directories).toEqual(["/opt/envs"]);
    expect(cat.scanned_at).toEqual(expect.any(Number));
  });

  it("replaces the catalog on each report", async () => {
    await withCatalog();
    await runsAs(e, "trainer").reportCatalog(sampleCatalog({ environments: [sampleCatalog().environments[1]!], problems: [] }));
    const cat = await runsAs(e, "viewer").listEnvironments();
    expect(cat.environments.map((x) => x.name)).toEqual(["countdown"]);
    expect(cat.problems).toEqual([]);
  });

  it("refuses a report with two environments of one name, or of the wrong shape, and keeps the catalog", async () => {
    await withCatalog();
    const gsm = sampleCatalog().environments[0]!;
    const dup = await refusal(() => runsAs(e, "trainer").reportCatalog(sampleCatalog({ environments: [gsm, { ...gsm, file_path: "/opt/envs/other.py" }] })));
    expect([dup.status, dup.code]).toEqual([422, "duplicate_environment"]);
    const bad = await raw(`/e/${e.name}/runs/agent/catalog`, { token: e.tokens.trainer, body: JSON.stringify({ environments: [{ name: "x", file_path: "/x.py" }] }) });
    expect(bad.status).toBe(422);
    expect(bad.json?.["detail"]).toMatch(/environments\.0\.class_name/);
    const badType = await raw(`/e/${e.name}/runs/agent/catalog`, {
      token: e.tokens.trainer,
      body: JSON.stringify({ environments: [{ ...gsm, fields: [{ name: "group_size", type: "int", default: 16, description: 5 }] }] }),
    });
    expect(badType.status).toBe(422);
    const malformed = await raw(`/e/${e.name}/runs/agent/catalog`, { token: e.tokens.trainer, body: "{not json" });
    expect(malformed.status).toBe(400);
    expect((await runsAs(e, "viewer").listEnvironments()).count).toBe(2);
  });

  it("only the trainer (the agent) reports; no token is 401, an unknown engine 404", async () => {
    for (const role of ["viewer", "client", "operator"] as const) {
      const r = await refusal(() => runsAs(e, role).reportCatalog(sampleCatalog()));
      expect([r.status, r.code]).toEqual([403, "forbidden"]);
    }
    expect((await raw(`/e/${e.name}/runs/environments`)).status).toBe(401);
    // Another engine's token, like the admin's, meets an engine that does not exist.
    expect((await raw(`/e/no-such-engine/runs/environments`, { token: e.tokens.viewer })).status).toBe(404);
    const unknown = await raw(`/e/no-such-engine/runs/environments`, { token: "test-admin-token" });
    expect([unknown.status, unknown.json?.["error"]]).toEqual([404, "unknown_engine"]);
    expect((await raw(`/e/Bad!Name/runs/environments`, { token: e.tokens.viewer })).status).toBe(404);
    expect((await runsAs(e, "viewer").listEnvironments()).count).toBe(0);
  });

  it("queues a scan for the agent", async () => {
    const r = await runsAs(e, "operator").scanEnvironments();
    expect(r.queued).toBe(true);
    const { commands } = await e.as("trainer").pollCommands();
    expect(commands.map((c) => c.body)).toEqual([{ kind: "scan_environments" }]);
    expect(commands[0]!.seq).toBe(r.command_seq);
    expect((await refusal(() => runsAs(e, "viewer").scanEnvironments())).status).toBe(403);
  });
});

describe("catalog status", () => {
  const heartbeat = (runs_off_reason: string | null = null) =>
    e.as("trainer").heartbeat({ agent_id: "agent-1", host: "gpu-1", pid: 7, trainer: { state: "idle" }, runs_off_reason });
  const status = async () => (await runsAs(e, "viewer").listEnvironments()).catalog_status;

  it("says no agent is connected, then that it left, with the catalog it reported", async () => {
    expect(await status()).toEqual({ state: "no_agent", detail: expect.stringMatching(/^No agent has connected to this engine: start the rollout agent/) });
    await heartbeat();
    await withCatalog();
    expect(await status()).toEqual({ state: "ready", detail: expect.stringMatching(/^2 environments from the agent's scan at \d{4}-/) });
    e.clock.t += 120_000;
    expect(await status()).toEqual({
      state: "no_agent",
      detail: expect.stringMatching(/^The engine's agent on gpu-1 is not connected \(last heard from 120 s ago\); runs cannot start until it is back\. The 2 environments listed are from its scan at /),
    });
  });

  it("passes on the agent's reason when its host has no runs config", async () => {
    await heartbeat("no runs config on this host (set ROLLOUT_RUNS_CONFIG to a JSON file)");
    expect(await status()).toEqual({
      state: "no_runs_config",
      detail: "The agent on gpu-1 has training runs off: no runs config on this host (set ROLLOUT_RUNS_CONFIG to a JSON file). Give it a runs config (ROLLOUT_RUNS_CONFIG) and restart it; it scans when it starts.",
    });
  });

  it("follows a scan: not scanned, pending, failed with the agent's error, then ready once a catalog is reported", async () => {
    await heartbeat();
    expect((await status()).state).toBe("not_scanned");
    const { command_seq } = await runsAs(e, "operator").scanEnvironments();
    expect(await status()).toEqual({ state: "scan_pending", detail: `The agent is scanning its environment directories (command ${command_seq}); list again in a few seconds.` });
    await e.as("trainer").ackCommand({ seq: command_seq, ok: false, detail: "environment directory /opt/envs does not exist" });
    expect(await status()).toEqual({ state: "scan_failed", detail: expect.stringMatching(/^The last scan failed: environment directory \/opt\/envs does not exist\. Fix that on the GPU host/) });
    // The refusal reaches the engine's overview too.
    expect((await e.as("viewer").overview()).refusals).toEqual([{ seq: command_seq, kind: "scan_environments", detail: "environment directory /opt/envs does not exist", at: e.clock.t / 1000 }]);
    await withCatalog();
    expect((await status()).state).toBe("ready");
  });
});

describe("run configuration", () => {
  it("shows nothing selected, then the selected environment's fields, locked fields and YAML", async () => {
    await withCatalog();
    const op = runsAs(e, "operator");
    expect(await runsAs(e, "viewer").getConfig()).toMatchObject({ environment: null, yaml: null, configurable_fields: [], edits: {} });
    await op.setLockedFields(LOCKS);
    const sel = await op.selectEnvironment({ name: "gsm8k" });
    // The six of LOCKS, and rollout_server_url: the engine's own Atropos API unless the operator locks it elsewhere.
    expect(sel.message).toMatch(/Selected environment 'gsm8k' \(5 configurable fields, 7 locked\)/);
    const cfg = await runsAs(e, "viewer").getConfig();
    expect(cfg.environment).toBe("gsm8k");
    expect(cfg.file_path).toBe("/opt/envs/gsm8k_server.py");
    expect(cfg.configurable_fields.map((f) => f.name)).toEqual(["group_size", "temperature", "use_wandb", "stop_words", "split"]);
    expect(cfg.locked_fields).toContainEqual({ section: "env", name: "max_token_length", locked_value: 8192, type: "int", default: 2048, description: "Longest sequence" });
    expect(cfg.locked_fields).toContainEqual({ section: "trainer", name: "learning_rate", locked_value: 0.00004, type: null, default: null, description: "" });
    expect(cfg.yaml).toBe(
      [
        "env:",
        "  group_size: 16",
        "  max_token_length: 8192",
        '  tokenizer_name: "Qwen/Qwen3-8B"',
        "  temperature: 1",
        "  use_wandb: true",
        '  split: "train"',
        `  rollout_server_url: "http://exchange.test/e/${e.name}/atropos"`,
        "openai:",
        '  - base_url: "http://localhost:8001/v1"',
        '    model_name: "Qwen/Qwen3-8B"',
        "trainer:",
        "  learning_rate: 0.00004",
        "  tiny_lr: 1.0e-7",
        "",
      ].join("\n"),
    );
    // Locked by the operator, the operator's URL wins, and an edit of it is refused as of any locked field.
    await op.setLockedFields({ set: [{ section: "env", name: "rollout_server_url", value: "http://localhost:8000" }] });
    const own = await runsAs(e, "viewer").getConfig();
    expect(own.yaml).toContain('rollout_server_url: "http://localhost:8000"');
    expect(own.locked_fields.filter((l) => l.name === "rollout_server_url")).toHaveLength(1);
  });

  it("applies well-typed edits and shows them in the fields and the YAML", async () => {
    await withCatalog();
    const op = runsAs(e, "operator");
    await op.selectEnvironment({ name: "gsm8k" });
    expect(await op.editConfig("group_size", 8)).toMatchObject({ field: "group_size", value: 8, edits: { group_size: 8 } });
    await op.editConfig("temperature", 0.7);
    await op.editConfig("temperature", 2); // an integer is a fine float
    await op.editConfig("stop_words", ["</s>", "\n\n"]);
    await op.editConfig("split", "test");
    await op.editConfig("use_wandb", false);
    const cfg = await op.getConfig();
    expect(cfg.edits).toEqual({ group_size: 8, split: "test", stop_words: ["</s>", "\n\n"], temperature: 2, use_wandb: false });
    expect(cfg.configurable_fields.find((f) => f.name === "group_size")).toMatchObject({ current_value: 8, default: 16, edited: true });
    expect(cfg.configurable_fields.find((f) => f.name === "split")).toMatchObject({ current_value: "test", edited: true });
    expect(cfg.yaml).toContain('  stop_words:\n    - "</s>"\n    - "\\n\\n"\n');
    // Optional fields take null.
    await op.editConfig("stop_words", null);
    expect((await op.getConfig()).edits["stop_words"]).toBeNull();
  });

  it("refuses an unknown field with the fields there are, and changes nothing", async () => {
    await withCatalog();
    const op = runsAs(e, "operator");
    await op.setLockedFields(LOCKS);
    await op.selectEnvironment({ name: "gsm8k" });
    const r = await refusal(() => op.editConfig("learning_rate_typo", 1));
    expect([r.status, r.code]).toEqual([422, "unknown_field"]);
    expect(r.hints["available_fields"]).toEqual(["group_size", "temperature", "use_wandb", "stop_words", "split"]);
    expect((await op.getConfig()).edits).toEqual({});
  });

  it("refuses a locked field, showing its locked value", async () => {
    await withCatalog();
    const op = runsAs(e, "operator");
    await op.setLockedFields(LOCKS);
    await op.selectEnvironment({ name: "gsm8k" });
    const r = await refusal(() => op.editConfig("max_token_length", 4096));
    expect([r.status, r.code]).toEqual([409, "field_locked"]);
    expect(r.detail).toMatch(/locked at 8192/);
    expect(r.hints).toEqual({ field: "max_token_length", locked_value: 8192 });
    expect((await op.getConfig()).edits).toEqual({});
  });

  it("refuses values of the wrong type, saying what was expected", async () => {
    await withCatalog();
    const op = runsAs(e, "operator");
    await op.selectEnvironment({ name: "gsm8k" });
    const cases: Array<[string, unknown, RegExp]> = [
      ["group_size", "8", /expected an integer, got the string "8"/],
      ["group_size", 8.5, /expected an integer, got the number 8.5/],
      ["group_size", null, /expected an integer, got null/],
      ["temperature", "hot", /expected a number/],
      ["use_wandb", 1, /expected true or false, got the integer 1/],
      ["stop_words", ["a", 3], /item 1: expected a string/],
      ["stop_words", "a", /expected a list or null/],
      ["split", "validation", /expected one of "train", "test", got the string "validation"/],
    ];
    for (const [field, value, why] of cases) {
      const r = await refusal(() => op.editConfig(field, value as never));
      expect([r.status, r.code], `${field}=${JSON.stringify(value)}`).toEqual([422, "wrong_type"]);
      expect(r.detail).toMatch(why);
      expect(r.hints["expected_type"]).toBe(GSM8K_FIELDS.find((f) => f.name === field)!.type);
    }
    expect((await op.getConfig()).edits).toEqual({});
  });

  it("refuses edits without a selection, without the value, or when the fields could not be read", async () => {
    await withCatalog();
    const op = runsAs(e, "operator");
    expect((await refusal(() => op.editConfig("group_size", 8))).code).toBe("no_environment_selected");
    await op.selectEnvironment({ name: "gsm8k" });
    const missing = await raw(`/e/${e.name}/runs/config/edit`, { token: e.tokens.operator, body: JSON.stringify({ field: "group_size" }) });
    expect(missing.status).toBe(422);
    expect(missing.json?.["detail"]).toMatch(/value/);
    const badName = await raw(`/e/${e.name}/runs/config/edit`, { token: e.tokens.operator, body: JSON.stringify({ field: "env.group_size", value: 1 }) });
    expect(badName.status).toBe(422);
    await op.selectEnvironment({ name: "countdown" });
    const r = await refusal(() => op.editConfig("anything", 1));
    expect([r.status, r.code]).toEqual([409, "fields_unknown"]);
    expect(r.detail).toMatch(/reasoning_gym/);
  });

  it("keeps an environment's edits across selections unless reset_edits", async () => {
    await withCatalog();
    const op = runsAs(e, "operator");
    await op.selectEnvironment({ name: "gsm8k" });
    await op.editConfig("group_size", 4);
    await op.selectEnvironment({ name: "countdown" });
    expect((await op.getConfig()).edits).toEqual({});
    const back = await op.selectEnvironment({ name: "gsm8k" });
    expect(back.edits).toEqual({ group_size: 4 });
    expect(back.message).toMatch(/1 earlier edits kept/);
    expect((await op.selectEnvironment({ name: "gsm8k", reset_edits: true })).edits).toEqual({});
  });

  it("notices when a rescan drops the selected environment", async () => {
    await withCatalog();
    const op = runsAs(e, "operator");
    await op.selectEnvironment({ name: "gsm8k" });
    await runsAs(e, "trainer").reportCatalog(sampleCatalog({ environments: [sampleCatalog().environments[1]!] }));
    const cfg = await op.getConfig();
    expect(cfg).toMatchObject({ environment: "gsm8k", environment_available: false });
    const r = await refusal(() => op.editConfig("group_size", 8));
    expect([r.status, r.code]).toEqual([404, "unknown_environment"]);
    expect(r.hints["available"]).toEqual(["countdown"]);
  });

  it("selecting is for operators; reading is for every role, also with the token in the path", async () => {
    await withCatalog();
    expect((await refusal(() => runsAs(e, "viewer").selectEnvironment({ name: "gsm8k" }))).status).toBe(403);
    expect((await refusal(() => runsAs(e, "trainer").editConfig("group_size", 1))).status).toBe(403);
    await runsViaUrl(e, "operator").selectEnvironment({ name: "gsm8k" });
    for (const role of ["viewer", "client", "trainer"] as const) expect((await runsViaUrl(e, role).getConfig()).environment).toBe("gsm8k");
    expect((await runsAs(e, "admin").getConfig()).environment).toBe("gsm8k");
  });
});

describe("locked fields", () => {
  it("are set and removed by an operator", async () => {
    const op = runsAs(e, "operator");
    expect((await op.setLockedFields(LOCKS)).locked_fields).toHaveLength(6);
    const after = await op.setLockedFields({ set: [{ section: "env", name: "max_token_length", value: 16384 }], remove: [{ section: "trainer", name: "tiny_lr" }] });
    expect(after.locked_fields).toContainEqual({ section: "env", name: "max_token_length", value: 16384 });
    expect(after.locked_fields.find((l) => l.name === "tiny_lr")).toBeUndefined();
    expect(after.locked_fields).toHaveLength(5);
  });

  it("refuses an empty change, a field named twice, an unknown section, and other roles", async () => {
    const op = runsAs(e, "operator");
    await op.setLockedFields(LOCKS);
    expect((await refusal(() => op.setLockedFields({}))).status).toBe(422);
    const twice = await refusal(() => op.setLockedFields({ set: [{ section: "env", name: "a", value: 1 }], remove: [{ section: "env", name: "a" }] }));
    expect([twice.status, twice.detail]).toEqual([422, expect.stringMatching(/env\.a is named twice/)]);
    const section = await raw(`/e/${e.name}/runs/config/locked`, { token: e.tokens.operator, body: JSON.stringify({ set: [{ section: "slurm", name: "a", value: 1 }] }) });
    expect(section.status).toBe(422);
    expect((await refusal(() => runsAs(e, "viewer").setLockedFields(LOCKS))).status).toBe(403);
    expect((await refusal(() => runsAs(e, "trainer").setLockedFields(LOCKS))).status).toBe(403);
    expect((await op.getConfig()).locked_fields).toHaveLength(7);
  });

  it("refuses a change that makes them all larger than one stored value, changing nothing: every run's config carries them", async () => {
    // 200 fields a request, each under the bound alone: they added up without one, to a set no run could carry.
    const op = runsAs(e, "operator");
    const value = "x".repeat(4_000);
    const batch = (r: number) => ({ set: Array.from({ length: 200 }, (_, i) => ({ section: "trainer" as const, name: `f_${r}_${i}`, value })) });
    await op.setLockedFields(batch(0));
    expect((await op.setLockedFields(batch(1))).locked_fields).toHaveLength(400);
    const before = await op.getConfig();
    const over = await refusal(() => op.setLockedFields(batch(2)));
    expect([over.status, over.code]).toEqual([413, "payload_too_large"]);
    expect(over.detail).toMatch(/^the locked fields after this change \(600\) is 2,4\d\d,\d{3} bytes as stored; the limit is 1,900,000 bytes .*: every run's config carries them all; remove some first$/);
    expect(await op.getConfig()).toEqual(before);
    // Removing some makes room, in the same request.
    const swapped = await op.setLockedFields({ ...batch(2), remove: batch(0).set.map(({ section, name }) => ({ section, name })) });
    expect(swapped.locked_fields).toHaveLength(400);
  }, 30_000);
});
