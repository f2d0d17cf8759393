/**
 * Turning stored step rows into the items a slime-style trainer reads, as plain functions:
 * the assistant's response appended to the prompt, the session's terminal reward propagated
 * to every step (the original kept as step_reward), and the pull's meta_info.
 */
import type { GroupReport, RolloutItem } from "../protocol/buffer";
import { byCodePoint } from "./code-point-order";

export type StoredStep = {
  pk: number;
  uid: string;
  session_id: string;
  step_index: number;
  group_id: string;
  messages: string;
  response: string;
  /** 1: `response` is its JSON (buffer-ingest.ts storedResponse). */
  response_escaped: number;
  reward: number;
  truncated: number;
  is_session_completed: number;
  weight_version: number;
  extra: string;
  created_at: number;
};

/** Keys of extra_info that the buffer sets itself; a worker's free-form fields cannot override them. */
const RESERVED = new Set([
  "timestamp",
  "steps",
  "finish_reason",
  "session_id",
  "group_id",
  "weight_version",
  "truncated",
  "step_pk",
  "is_session_completed",
  "step_reward",
  "terminal_reward",
  "stale",
  "usable",
  "failed_infra",
]);

/** `failed`: the session is failed_infra, so its item is delivered (in a partial group only) with usable false. */
export function toItem(step: StoredStep, terminalReward: number | null, stale: boolean, failed: boolean): RolloutItem {
  const extra = JSON.parse(step.extra) as Record<string, unknown>;
  const free = Object.fromEntries(Object.entries(extra).filter(([k]) => !RESERVED.has(k)));
  const messages = [...(JSON.parse(step.messages) as Record<string, unknown>[]), { role: "assistant", content: step.response_escaped === 1 ? (JSON.parse(step.response) as string) : step.response }];
  return {
    uid: step.uid,
    instance_id: step.group_id,
    messages,
    reward: terminalReward ?? step.reward,
    extra_info: {
      env_id: "",
      ...free,
      timestamp: step.created_at / 1000,
      steps: step.step_index,
      // As in the seed: finish_reason only marks truncation for the trainer.
      finish_reason: step.truncated ? "length" : "stop",
      session_id: step.session_id,
      group_id: step.group_id,
      weight_version: step.weight_version,
      truncated: step.truncated === 1,
      step_pk: step.pk,
      is_session_completed: step.is_session_completed === 1,
      ...(terminalReward !== null ? { step_reward: step.reward, terminal_reward: terminalReward } : {}),
      stale,
      usable: !failed,
      failed_infra: failed,
    },
  };
}

export function metaInfo(items: RolloutItem[], groups: string[], cursor: number | null, staleGroups: string[], consumerVersion: number | null, reports: GroupReport[]) {
  const rewards = items.map((i) => i.reward);
  const versions = items.map((i) => Number(i.extra_info["weight_version"] ?? 0));
  return {
    total_samples: items.length,
    avg_reward: rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : 0,
    // In the seed's order, Python's sorted(): by code point.
    finished_groups: [...groups].sort(byCodePoint),
    avg_weight_version: versions.length ? versions.reduce((a, b) => a + b, 0) / versions.length : 0,
    max_weight_version: versions.length ? Math.max(...versions) : 0,
    cursor,
    stale_groups: [...staleGroups].sort(byCodePoint),
    consumer_weight_version: consumerVersion,
    groups: [...reports].sort((a, b) => byCodePoint(a.group_id, b.group_id)),
  };
}

/** What a group's row holds for its report. */
export type ReportedGroup = {
  group_id: string;
  completed_sessions: number;
  failed_sessions: number;
  partial: number;
  min_weight_version: number | null;
  first_row_at: number | null;
  ready_at: number | null;
  last_row_at: number;
};

/** A group's report as it is consumed at `now` by a trainer at `consumerVersion`. */
export function groupReport(g: ReportedGroup, consumerVersion: number | null, now: number): GroupReport {
  const readyAt = g.ready_at ?? now;
  return {
    group_id: g.group_id,
    usable_sessions: g.completed_sessions,
    failed_sessions: g.failed_sessions,
    partial: g.partial === 1,
    oldest_weight_version: g.min_weight_version,
    lag_versions: consumerVersion === null || g.min_weight_version === null ? null : consumerVersion - g.min_weight_version,
    age_seconds: (now - (g.first_row_at ?? g.last_row_at)) / 1000,
    queued_seconds: (now - readyAt) / 1000,
  };
}

/** Whether a group whose oldest step has `minVersion` lags the trainer's `current` too far. */
export function isStale(minVersion: number | null, current: number | null, maxStaleness: number | null): boolean {
  return maxStaleness !== null && current !== null && minVersion !== null && current - minVersion > maxStaleness;
}
