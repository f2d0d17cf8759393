/**
 * Inference tests: run the selected environment's `process` mode for a few steps against
 * OpenAI-compatible endpoints, on the GPU host, and keep the accuracy per model in D1. The
 * test is queued for the agent and answered later, since it takes minutes; its API keys stay
 * on the host (each model names the environment variable that holds its key).
 */
import { and, eq, notInArray } from "drizzle-orm";
import { z } from "zod";
import { inferenceTests } from "../db/schema";
import { InferenceTestRequest, ModelResult, type StartInferenceTestRequest, type InferenceTestReport, type InferenceTestView } from "../protocol/runs";
import { loadDraft, unknownEnvironment } from "./config-ops";
import { parseJson } from "./config-store";
import type { RunsCtx } from "./context";
import { storedJsonTooLarge } from "../protocol/limits";
import { done, refuse, tooLarge, type RunsReply } from "./reply";

type TestRow = typeof inferenceTests.$inferSelect;
const Models = z.array(ModelResult);

function newTestId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(10));
  return `itest_${[...bytes].map((b) => (b % 36).toString(36)).join("")}`;
}

const round3 = (x: number): number => Math.round(x * 1000) / 1000;

function view(r: TestRow): InferenceTestView {
  const models = parseJson(Models, r.models);
  const working = models.filter((m) => m.steps_tested > 0);
  const best = working.reduce<(typeof working)[number] | null>((b, m) => (b === null || m.accuracy > b.accuracy ? m : b), null);
  return {
    test_id: r.id,
    environment: r.environment,
    status: r.status,
    detail: r.detail,
    request: parseJson(InferenceTestRequest, r.request),
    models,
    summary:
      r.status === "done" || r.status === "failed"
        ? {
            models_tested: models.length,
            models_succeeded: working.length,
            best_model: best?.model ?? null,
            avg_accuracy: working.length ? round3(working.reduce((s, m) => s + m.accuracy, 0) / working.length) : 0,
            environment_working: working.length > 0,
          }
        : null,
    created_at: r.createdAt / 1000,
    finished_at: r.finishedAt === null ? null : r.finishedAt / 1000,
  };
}

async function findTest(ctx: RunsCtx, id: string) {
  const rows = await ctx.db.select().from(inferenceTests).where(and(eq(inferenceTests.engine, ctx.engine), eq(inferenceTests.id, id)));
  return rows[0] ?? refuse(404, "unknown_inference_test", `No inference test '${id}' on this engine.`, { test_id: id });
}

export async function startInferenceTest(ctx: RunsCtx, req: StartInferenceTestRequest): Promise<RunsReply<InferenceTestView & { message: string }>> {
  const d = await loadDraft(ctx);
  if (d.selected === null) return refuse(409, "no_environment_selected", "No environment is selected: select the environment to test first.");
  if (d.env === null) return unknownEnvironment(ctx, d.selected);
  const id = newTestId();
  const now = ctx.now();
  const made: typeof inferenceTests.$inferSelect = { id, engine: ctx.engine, environment: d.env.name, status: "pending", detail: "", request: JSON.stringify(req), models: "[]", createdAt: now, finishedAt: null };
  await ctx.db.batch([ctx.live, ctx.db.insert(inferenceTests).values(made)]);
  const q = await ctx.enqueue("test_inference", {
    kind: "test_inference",
    test_id: id,
    environment: { name: d.env.name, class_name: d.env.class_name, file_path: d.env.file_path },
    num_steps: req.num_steps,
    group_size: req.group_size,
    models: req.models,
    timeout_seconds: req.timeout_seconds,
  });
  if (!q.ok) {
    await ctx.db.update(inferenceTests).set({ status: "failed", detail: `could not queue the test: ${q.detail}`, finishedAt: now }).where(eq(inferenceTests.id, id));
    return q;
  }
  // Made and queued: the answer is the test as it was made, not a read of D1 that could fail after the agent has it.
  const rollouts = req.num_steps * req.group_size;
  return done({
    ...view(made),
    message: `Inference test ${id} queued: ${req.num_steps} steps x ${req.group_size} completions = ${rollouts} rollouts per model, ${req.models.length} model(s), at most ${req.timeout_seconds} s each. Ask for it by its test_id for the results.`,
  });
}

export async function getInferenceTest(ctx: RunsCtx, id: string): Promise<RunsReply<InferenceTestView>> {
  const row = await findTest(ctx, id);
  if ("ok" in row) return row;
  return done(view(row));
}

export async function agentReportInferenceTest(ctx: RunsCtx, id: string, report: InferenceTestReport): Promise<RunsReply<InferenceTestView>> {
  const row = await findTest(ctx, id);
  if ("ok" in row) return row;
  // A finished test keeps its result: a report repeated after a lost answer changes nothing.
  if (row.status === "done" || row.status === "failed") return done(view(row));
  const over = storedJsonTooLarge("models", report.models);
  if (over !== null) return tooLarge(over);
  const finished = report.status !== "running";
  // Written only while it is still unfinished: a report that read the row before another
  // finished it (a progress report retried across the final one) leaves the result be.
  await ctx.db
    .update(inferenceTests)
    .set({ status: report.status, detail: report.detail, models: JSON.stringify(report.models), finishedAt: finished ? ctx.now() : null })
    .where(and(eq(inferenceTests.id, id), notInArray(inferenceTests.status, ["done", "failed"])));
  return getInferenceTest(ctx, id);
}
