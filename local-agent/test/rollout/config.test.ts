/** The rollout settings in the agent's config: flags, environment, config file, bad templates. */
import { describe, expect, it } from "vitest";
import { resolveConfig, type ConfigSources } from "../../src/config";

const required = ["--server", "https://rx.example.com", "--engine", "default", "--token", "tok"];

function resolve(over: Partial<ConfigSources>) {
  return resolveConfig({ argv: [], env: {}, cwd: "/work/dir", readFile: () => "{}", ...over });
}

describe("rollout settings", () => {
  it("splits the rollout command, resolves its working directory and keeps the admin URL without a trailing slash", () => {
    const r = resolve({
      argv: [...required, "--rollout-command", "python3 launcher.py --job-id {job_session} --rl-group-size {group_size} --url '{engine_url}'", "--rollout-cwd", "aievobox"],
      env: { ROLLOUT_INFERENCE_ADMIN_URL: "http://127.0.0.1:30000/" },
    });
    if (!r.ok || r.request.kind !== "run") throw new Error(JSON.stringify(r));
    expect(r.request.config).toMatchObject({
      rolloutCommand: ["python3", "launcher.py", "--job-id", "{job_session}", "--rl-group-size", "{group_size}", "--url", "{engine_url}"],
      rolloutCwd: "/work/dir/aievobox",
      inferenceAdminUrl: "http://127.0.0.1:30000",
    });
  });

  it("is optional, and a placeholder typo fails at startup", () => {
    const none = resolve({ argv: required });
    if (!none.ok || none.request.kind !== "run") throw new Error(JSON.stringify(none));
    expect(none.request.config).toMatchObject({ rolloutCommand: null, rolloutCwd: null, inferenceAdminUrl: null });
    expect(resolve({ argv: [...required, "--rollout-command", "launcher --job {job}"] })).toEqual({
      ok: false,
      errors: [expect.stringMatching(/^rolloutCommand: unknown placeholder \{job\}; known: \{job_session\}/)],
    });
  });
});
