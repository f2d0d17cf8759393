/**
 * What the engine shows of its episodes: read-only queries over its SQLite, each walking an
 * index or only the rows it returns. The engine object settles pending writes, checks the
 * caller and wraps these in its replies.
 */
import type { CompletedTasksResponse, RunningEpisodesResponse } from "../protocol/agent";
import type { EpisodeStatus, FailedTask } from "../protocol/swarm";
import { seconds } from "./rules";

export type EpisodeRow = {
  episode_uuid: string;
  state: "registered" | "claimed" | "resetting";
  openai_base_url: string;
  openai_api_key: string;
  zmq_addr: string;
  episode_type: "train" | "eval";
  client_uuid: string;
  fence: number;
  last_activity: number;
  discard_timeout: number;
  expires_at: number | null;
  llm_call_count: number;
  task_id: string;
  /** The trainer's weight version when the claim was made; null before it said one. */
  claim_weight_version: number | null;
  /** 1 when the trainer registered the episode again while it waited for its runner's reset (episode-queue.ts register). */
  registered_again: number;
  /** The hash of the engine token that made the live claim; null for the admin's (and claims made before migration 17). */
  claimed_by: string | null;
};

/**
 * btoa takes Latin-1 only, and an episode's name may be any text: the JSON is written in ASCII
 * (every other character as its \u escape, which JSON.parse reads back the same).
 */
const encodeCursor = (expiresAt: number, uuid: string): string =>
  btoa(JSON.stringify([expiresAt, uuid]).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`));

export function decodeCursor(cursor: string): { expiresAt: number; uuid: string } | null {
  try {
    const v: unknown = JSON.parse(atob(cursor));
    if (Array.isArray(v) && v.length === 2 && typeof v[0] === "number" && typeof v[1] === "string") return { expiresAt: v[0], uuid: v[1] };
  } catch {
    // not base64 or not JSON: refused below
  }
  return null;
}

/** Every live episode, FIFO order within each state; the trainer's secrets only when `secrets`. */
export function episodeBuffer(sql: SqlStorage, secrets: boolean): EpisodeStatus[] {
  return sql
    .exec<EpisodeRow>("SELECT * FROM episodes ORDER BY state, queue_seq")
    .toArray()
    .map((e) => ({
      episode_uuid: e.episode_uuid,
      episode_status: e.state === "registered" ? "registered" : "claimed",
      episode_type: e.episode_type,
      openai_base_url: secrets ? e.openai_base_url : "",
      openai_api_key: secrets ? e.openai_api_key : "",
      client_uuid: e.client_uuid,
      zmq_listen_result_addr: secrets ? e.zmq_addr : "",
      latest_activity_timestamp: e.last_activity / 1000,
      discard_episode_timeout: e.discard_timeout,
      llm_call_count: e.llm_call_count,
      debug_log: [],
      optional_task_id: e.task_id,
    }));
}

/** The seed's running_episode_details: the lease index holds exactly the claimed episodes, so O(claimed). */
export function runningDetails(sql: SqlStorage, now: number): Record<string, Record<string, string>> | null {
  const running: Record<string, Record<string, string>> = {};
  for (const e of sql.exec<EpisodeRow>("SELECT * FROM episodes WHERE state = 'claimed' ORDER BY expires_at")) {
    running[e.episode_uuid] = {
      episode_status: "claimed",
      time_since_last_activity: seconds((now - e.last_activity) / 1000),
      discard_episode_timeout: seconds(e.discard_timeout),
      llm_call_count: String(e.llm_call_count),
      client_uuid: e.client_uuid,
      optional_task_id: e.task_id,
    };
  }
  return Object.keys(running).length > 0 ? running : null;
}

/** The seed's completed_tasks_client_uuids: the clients of every train episode of the run ended since the last clear, per task. */
export function completedTaskClients(sql: SqlStorage, run: number): Record<string, string[]> {
  const byTask: Record<string, string[]> = {};
  for (const f of sql.exec<{ task_id: string; client_uuid: string }>(
    "SELECT task_id, client_uuid FROM finished WHERE episode_type = 'train' AND task_id != '' AND run = ? AND failed = 0 ORDER BY ended_at",
    run,
  )) {
    (byTask[f.task_id] ??= []).push(f.client_uuid);
  }
  return byTask;
}

/**
 * The train claims of the run that failed for reasons not the policy's since the last clear, per
 * task, apart from the rewards: a trainer that registers its own episodes re-registers what it
 * needs from this. O(failed rollouts of the rolling phase).
 */
export function failedTasks(sql: SqlStorage, run: number): Record<string, FailedTask> {
  const byTask: Record<string, FailedTask> = {};
  for (const f of sql.exec<{ task_id: string; episode_uuid: string; reason: "failed_infra" | "aborted" | "reaped" }>(
    "SELECT task_id, episode_uuid, reason FROM failed_rollouts WHERE task_id != '' AND run = ? ORDER BY at",
    run,
  )) {
    const t = (byTask[f.task_id] ??= { failed_infra: 0, aborted: 0, reaped: 0, episode_uuids: [] });
    t[f.reason] += 1;
    t.episode_uuids.push(f.episode_uuid);
  }
  return byTask;
}

/** One page of claimed episodes, soonest to expire first, after `after`: O(log n + limit) on the lease index. */
export function runningPage(
  sql: SqlStorage,
  now: number,
  after: { expiresAt: number; uuid: string } | null,
  limit: number,
): Omit<RunningEpisodesResponse, "total"> {
  const rows = sql
    .exec<EpisodeRow>(
      `SELECT * FROM episodes WHERE state = 'claimed' AND (expires_at, episode_uuid) > (?, ?)
       ORDER BY expires_at, episode_uuid LIMIT ?`,
      after?.expiresAt ?? -1,
      after?.uuid ?? "",
      limit + 1,
    )
    .toArray();
  const page = rows.slice(0, limit);
  const last = page[page.length - 1];
  return {
    episodes: page.map((e) => ({
      episode_uuid: e.episode_uuid,
      client_uuid: e.client_uuid,
      episode_type: e.episode_type,
      task_id: e.task_id,
      idle_seconds: (now - e.last_activity) / 1000,
      discard_episode_timeout: e.discard_timeout,
      expires_in: ((e.expires_at ?? now) - now) / 1000,
      llm_call_count: e.llm_call_count,
      fence: e.fence,
    })),
    next_cursor: rows.length > limit && last ? encodeCursor(last.expires_at ?? 0, last.episode_uuid) : null,
  };
}

/** Train episodes of the run ended in global step `step`, per task (at most 500 tasks, the busiest first). */
export function completedTasks(sql: SqlStorage, step: number | null, run: number): CompletedTasksResponse["tasks"] {
  return sql
    .exec<{ task_id: string; episodes: number; clients: number; mean_reward: number | null; failed: number }>(
      `SELECT task_id, SUM(episodes) AS episodes, SUM(clients) AS clients, MAX(mean_reward) AS mean_reward, SUM(failed) AS failed FROM (
         SELECT task_id, COUNT(*) AS episodes, COUNT(DISTINCT client_uuid) AS clients, AVG(reward) AS mean_reward, 0 AS failed FROM finished
         WHERE episode_type = 'train' AND task_id != '' AND global_step IS ?1 AND run = ?2 AND failed = 0 GROUP BY task_id
         UNION ALL
         SELECT task_id, 0, 0, NULL, COUNT(*) FROM failed_rollouts WHERE task_id != '' AND global_step IS ?1 AND run = ?2 GROUP BY task_id
       ) GROUP BY task_id ORDER BY episodes DESC, failed DESC, task_id LIMIT 500`,
      step,
      run,
    )
    .toArray();
}

/**
 * Ended episodes by where their result stands on its way to the runner: the batch's, and those a
 * phase change took out of it (ends_before_sync, kept while on their way and until a phase change
 * at least SYNCED_END_MEMORY_MS later): AgentJet's trainer leaves ROLLING as its batch's last end
 * is stored, so most results reach their runner, or fail to, after that.
 */
export function deliveryCounts(sql: SqlStorage): { pending: number; delivered: number; undeliverable: number } {
  const by = Object.fromEntries(
    sql
      .exec<{ delivery: string; n: number }>("SELECT delivery, COUNT(*) AS n FROM (SELECT delivery FROM finished UNION ALL SELECT delivery FROM ends_before_sync) GROUP BY delivery")
      .toArray()
      .map((r) => [r.delivery, r.n]),
  );
  return { pending: by["pending"] ?? 0, delivered: by["delivered"] ?? 0, undeliverable: by["undeliverable"] ?? 0 };
}

/** The newest results the agent could not deliver, with its reason (the batch's, and those deliveryCounts counts apart from it). */
export function undeliverable(sql: SqlStorage, secrets: boolean): { episode_uuid: string; fence: number; detail: string; ended_at: number }[] {
  return sql
    .exec<{ episode_uuid: string; fence: number; delivery_detail: string; ended_at: number }>(
      `SELECT episode_uuid, fence, delivery_detail, ended_at FROM finished WHERE delivery = 'undeliverable'
       UNION ALL SELECT episode_uuid, fence, delivery_detail, ended_at FROM ends_before_sync WHERE delivery = 'undeliverable'
       ORDER BY ended_at DESC LIMIT 20`,
    )
    .toArray()
    .map((r) => ({ episode_uuid: r.episode_uuid, fence: r.fence, detail: secrets ? r.delivery_detail : withoutRunnerAddresses(r.delivery_detail), ended_at: r.ended_at / 1000 }));
}

/** A ZeroMQ endpoint (tcp://host:port, ipc:///path, ...), up to its last character that is not punctuation. */
const ZMQ_ENDPOINT = /\b(?:tcp|ipc|inproc|pgm|epgm|udp|ws|wss|vmci|tipc):\/\/\S*[^\s:,;.)'"]/g;

/**
 * A registered address that is no ZeroMQ URL ("10.0.0.7:5555"), which the agent names quoted
 * as it refuses it (local-agent/src/runner-link.ts): not shaped like an endpoint, so found by
 * those words (to the last quote before them: the address may hold quotes, unescaped).
 */
const NOT_ZMQ = /"[^\n]*"( is not a ZeroMQ address)/g;

/**
 * The agent's words for a result or reset it could not hand over name the runner's address
 * ("runner at tcp://... did not ack"), which only the trainer and the admin see
 * (docs/security.md): for the other roles' views the address is left out, the words kept.
 */
export function withoutRunnerAddresses(text: string): string {
  return text.replace(ZMQ_ENDPOINT, "<runner address>").replace(NOT_ZMQ, '"<runner address>"$1');
}
