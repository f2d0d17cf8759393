/**
 * The demo's rollout clients, as an AgentJet SwarmClient works: claim an episode, run the task
 * against the policy through the exchange's relay with the claim's own key, score the answer
 * and end the episode with the reward.
 */
import { EngineClient, ExchangeError } from "../../src/client";
import { MODEL } from "./policy";
import { pick, type Rng } from "./rng";
import { TASKS, prompt, reward } from "./tasks";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export type ClientStats = { episodes: number; llmCalls: number; errors: number };

export async function runAgentJetClient(id: number, engine: EngineClient, rng: Rng, stopped: () => boolean, stats: ClientStats): Promise<void> {
  const client_uuid = `demo-client-${id}`;
  while (!stopped()) {
    try {
      const claim = await engine.claimEpisode({ client_uuid, episode_type: "train", discard_episode_timeout: 60 });
      if (!claim.success) {
        // "No available episodes" between a step's results and the next registrations; any
        // other cause (a weight sync in progress) the same way, a little longer.
        await sleep(claim.fail_cause.includes("No available episodes") ? 20 : 100);
        continue;
      }
      const task = pick(rng, TASKS);
      const res = await fetch(`${claim.openai_base_url}/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${claim.openai_api_key}` },
        body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: prompt(task) }], temperature: 1 }),
      });
      stats.llmCalls++;
      const end = { client_uuid, episode_uuid: claim.episode_uuid, task_id: task.id, ...(claim.fence !== undefined ? { fence: claim.fence } : {}) };
      if (!res.ok) {
        stats.errors++;
        await engine.abortEpisode({ ...end, task_id: "", workflow_output: { reward: 0, metadata: { task_id: "" } } });
        continue;
      }
      const answer = (await res.json()) as { choices?: { message?: { content?: unknown } }[] };
      const tool = String(answer.choices?.[0]?.message?.content ?? "");
      const r = reward(task, tool);
      await engine.endEpisode({ ...end, workflow_output: { reward: r, is_success: r === 1, metadata: { task_id: task.id, tool } } });
      stats.episodes++;
    } catch (e) {
      // A refusal (a claim that ended under us as the step moved on) or a network error: say
      // what it was unless it is the expected refusal, or the demo stopping under us, and go
      // on. A client that stops would leave its episode claimed until the lease ran out.
      stats.errors++;
      if (!stopped() && !(e instanceof ExchangeError && e.code === "claim_lost")) process.stderr.write(`[demo] client ${id}: ${e instanceof Error ? e.message : String(e)}\n`);
      await sleep(100);
    }
  }
}
