/**
 * The FIFO queue of registered episodes and the fences they carry: registering, requeueing after
 * a claim (through the runner's reset when it has one), and deleting, which moves the fences a
 * deleted row held into the floor so that a restarted object never issues them again. Clearing
 * the batch's ends at a sync that keeps claims remembers them apart (ends_before_sync), for
 * what must still know them: a repeated end, and a result still on its way to its runner.
 */
import type { BoolResponse, RegisterEpisodeRequest } from "../protocol/swarm";
import type { CommandBody } from "../protocol/commands";
import type { ClaimRow, EpisodeState } from "./episode-state";

export function register(e: EpisodeState, req: RegisterEpisodeRequest): BoolResponse {
  if (e.store.meta.status !== "ENGINE.ROLLING") {
    return { success: false, failure_reason: "Engine is not in rolling state. Cannot register episode." };
  }
  // One statement. A retried registration (the trainer retries after 2 s) keeps its place in
  // the queue and takes the new URL and key. So does one that arrives while the episode waits
  // for its runner's reset: it is acknowledged, so it must be what the episode serves with
  // afterwards, and it keeps the episode even if the old runner cannot be reset
  // (registered_again, read by wasReset). The reset itself already holds the old runner's
  // address in its command. A claimed episode is left alone: its claim's result goes to the
  // runner it was claimed from. A new row's fences start above every fence this engine has
  // issued, so a uuid registered again (after it ended, was unregistered, or was cleared with
  // its rolling phase) never has a claim that shares a fence, and so a per-claim key, with a
  // claim of its old life. A registration of a uuid whose train result is on its way to its runner,
  // or reached it, in this batch is the trainer's retry of the one that was claimed (its answer
  // lost, the claim and end quicker than its 2 s timeout): it is answered as that one was, and
  // registers nothing, else the episode would be rolled out and its reward counted twice.
  e.store.sql.exec(
    `INSERT INTO episodes (episode_uuid, state, queue_seq, openai_base_url, openai_api_key, zmq_addr, last_activity, fence)
     SELECT ?1, 'registered', ?2, ?3, ?4, ?5, ?6, ?7
     WHERE COALESCE((SELECT delivery FROM finished WHERE episode_uuid = ?1 ORDER BY fence DESC LIMIT 1), 'none') NOT IN ('pending', 'delivered')
     ON CONFLICT (episode_uuid) DO UPDATE SET openai_base_url = excluded.openai_base_url, openai_api_key = excluded.openai_api_key,
       zmq_addr = excluded.zmq_addr, registered_again = episodes.state = 'resetting'
     WHERE episodes.state IN ('registered', 'resetting')`,
    req.episode_uuid,
    e.nextQueueSeq++,
    req.openai_base_url,
    req.openai_api_key,
    req.zmq_listen_result_addr,
    e.host.now(),
    e.fenceHigh,
  );
  return { success: true, failure_reason: "" };
}

/**
 * How long a sync that keeps claims remembers the ends it clears from the batch, for a client
 * that sends an end again (its answer lost) during or after the sync. Forgotten only at a later
 * such sync (the only time rows are added), so the table holds the ends of the syncs of this
 * long and the last one's, besides results still on their way to their runners.
 */
export const SYNCED_END_MEMORY_MS = 600_000;

/**
 * What ends_before_sync says of a claim cleared with its rolling phase, unended: the latest claim
 * of its episode, which no end repeats.
 */
export const CLEARED_CLAIM = "cleared";

/**
 * Every end the engine knows, to select from: in the batch, or remembered across a sync that
 * keeps claims. SQLite applies a condition on it to each table, which it probes by key.
 */
export const KNOWN_ENDS = `(SELECT episode_uuid, fence, client_uuid, delivery FROM finished
  UNION ALL SELECT episode_uuid, fence, client_uuid, delivery FROM ends_before_sync)`;

/** The episode's latest end. */
export type LatestEnd = { fence: number; client_uuid: string; delivery: "none" | "pending" | "delivered" | "undeliverable" | typeof CLEARED_CLAIM };

export function latestEnd(e: EpisodeState, episodeUuid: string): LatestEnd | null {
  return e.store.sql.exec<LatestEnd>(`SELECT fence, client_uuid, delivery FROM ${KNOWN_ENDS} WHERE episode_uuid = ? ORDER BY fence DESC LIMIT 1`, episodeUuid).toArray()[0] ?? null;
}

/**
 * The claim `fence` of the episode was aborted or reaped: the latest claim of it that did not
 * end, which an end sent again without a fence is compared with once the episode's row is gone
 * or registered again (a registration is no claim). Kept while the engine knows ends of the
 * episode (forgetUnended); the abort and reap paths only, never an end's.
 */
export function noteUnended(e: EpisodeState, episodeUuid: string, fence: number, clientUuid: string): void {
  e.store.sql.exec(
    `INSERT INTO unended_claims (episode_uuid, fence, client_uuid) VALUES (?, ?, ?)
     ON CONFLICT (episode_uuid) DO UPDATE SET fence = excluded.fence, client_uuid = excluded.client_uuid WHERE excluded.fence > fence`,
    episodeUuid,
    fence,
    clientUuid,
  );
}

/** The episode's latest claim that was aborted or reaped, or null. */
export function latestUnended(e: EpisodeState, episodeUuid: string): { fence: number; client_uuid: string } | null {
  return e.store.sql.exec<{ fence: number; client_uuid: string }>("SELECT fence, client_uuid FROM unended_claims WHERE episode_uuid = ?", episodeUuid).toArray()[0] ?? null;
}

/** Unended claims of episodes with no end known any more: no end of theirs can be sent again. */
function forgetUnended(e: EpisodeState): void {
  e.store.sql.exec(`DELETE FROM unended_claims WHERE episode_uuid NOT IN (SELECT episode_uuid FROM ${KNOWN_ENDS})`);
}

export function claimedCheck(e: EpisodeState, episodeUuid: string, unregister: boolean): BoolResponse {
  if (!e.live()) return { success: false, failure_reason: "" };
  const ep = e.episode(episodeUuid);
  // The seed keeps an ended train episode claimed until its runner acked the result: a trainer
  // told "not claimed" meanwhile gives up on a result on its way. Only a train end with a
  // runner is ever pending; there is no row left to unregister.
  if (ep === null) return { success: latestEnd(e, episodeUuid)?.delivery === "pending", failure_reason: "" };
  // An episode waiting for its runner's reset still belongs to the claim being undone.
  if (ep.state !== "registered") return { success: true, failure_reason: "" };
  if (unregister) dropEpisode(e, episodeUuid);
  return { success: false, failure_reason: "" };
}

/** The runner's context was reset for the claim being undone: the episode serves again. */
export function wasReset(e: EpisodeState, body: Extract<CommandBody, { kind: "reset" }>, succeeded: boolean): void {
  const ep = e.episode(body.episode_uuid);
  if (ep === null || ep.state !== "resetting" || ep.fence !== body.fence) return;
  // A runner that cannot be reset cannot serve the episode again; a registration acknowledged
  // since names the runner that serves it now, so it stands whatever became of the old one.
  if (succeeded || ep.registered_again === 1) requeue(e, body.episode_uuid);
  else dropEpisode(e, body.episode_uuid);
}

/**
 * Deletes every episode, as a rolling phase ends; the fences they held go into the floor. With
 * `keepEnds` (a weight sync, which AgentJet's trainer may begin the moment the batch's last end
 * is stored, before that end's client has its answer) the batch's ends are remembered, as at a
 * sync that keeps claims, so that an end sent again is answered as the repeat it is; otherwise
 * (the engine stopping or starting) remembered ends go too.
 */
export function clearAll(e: EpisodeState, keepEnds: boolean): void {
  if (keepEnds) {
    rememberEnds(e);
    // The live claims go with the phase, unended: remembered as such (CLEARED_CLAIM), so that an
    // end of one without a fence is not taken for the repeat of an earlier end of its episode.
    e.store.sql.exec(
      `INSERT OR REPLACE INTO ends_before_sync (episode_uuid, fence, client_uuid, delivery, cleared_at)
       SELECT episode_uuid, fence, client_uuid, '${CLEARED_CLAIM}', ? FROM episodes WHERE state = 'claimed'`,
      e.host.now(),
    );
  } else e.store.sql.exec("DELETE FROM ends_before_sync");
  e.store.sql.exec("DELETE FROM episodes");
  e.store.sql.exec("DELETE FROM aborts");
  deleteBatch(e);
}

/**
 * Ends the batch at a sync that keeps claims: its finished and failed claims leave the pool
 * view, the live ones stay. Claims live on through the sync, so their ends must still be known:
 * what a repeated end is compared with and where a delivery stands are kept in ends_before_sync.
 */
export function clearFinished(e: EpisodeState): void {
  rememberEnds(e);
  // An end takes a train episode's row without a look here (the hot path): the aborts of episodes gone since go now.
  e.store.sql.exec("DELETE FROM aborts WHERE episode_uuid NOT IN (SELECT episode_uuid FROM episodes)");
  deleteBatch(e);
}

/** Copies the batch's ends into ends_before_sync, before the batch is deleted; forgets those remembered long enough. */
function rememberEnds(e: EpisodeState): void {
  const now = e.host.now();
  forgetSyncedEnds(e, now);
  e.store.sql.exec(
    `INSERT OR REPLACE INTO ends_before_sync (episode_uuid, fence, client_uuid, delivery, cleared_at, delivery_detail, ended_at)
     SELECT episode_uuid, fence, client_uuid, delivery, ?, delivery_detail, ended_at FROM finished`,
    now,
  );
}

/** Ends remembered longer than SYNCED_END_MEMORY_MS go, but not while their result is on its way to the runner. */
function forgetSyncedEnds(e: EpisodeState, now: number): void {
  e.store.sql.exec("DELETE FROM ends_before_sync WHERE cleared_at < ? AND delivery != 'pending'", now - SYNCED_END_MEMORY_MS);
  forgetUnended(e);
}

/** Deletes the batch's finished and failed claims; their fences go into the floor. */
function deleteBatch(e: EpisodeState): void {
  e.store.sql.exec("DELETE FROM finished");
  e.store.sql.exec("DELETE FROM failed_rollouts");
  forgetUnended(e);
  retireFences(e);
}

/** Counted over the partial index of each state, never by scanning the table. */
export function counts(e: EpisodeState): { registered: number; claimed: number; resetting: number } {
  // Literal states, not parameters: SQLite uses a partial index only when the WHERE matches its own.
  const count = (sql: string) => e.store.sql.exec<{ n: number }>(sql).one().n;
  return {
    registered: count("SELECT COUNT(*) AS n FROM episodes WHERE state = 'registered'"),
    claimed: count("SELECT COUNT(*) AS n FROM episodes WHERE state = 'claimed'"),
    resetting: count("SELECT COUNT(*) AS n FROM episodes WHERE state = 'resetting'"),
  };
}

/** Ends a claim without a result: back to the queue (after the runner's reset, if it has one) or gone. */
export function release(e: EpisodeState, ep: ClaimRow, how: "requeue" | "delete"): void {
  if (how === "delete") {
    dropEpisode(e, ep.episode_uuid);
  } else if (ep.zmq_addr !== "") {
    e.store.sql.exec("UPDATE episodes SET state = 'resetting', expires_at = NULL WHERE episode_uuid = ?", ep.episode_uuid);
    e.host.enqueue({ kind: "reset", episode_uuid: ep.episode_uuid, fence: ep.fence, zmq_listen_result_addr: ep.zmq_addr });
  } else {
    requeue(e, ep.episode_uuid);
  }
}

function requeue(e: EpisodeState, episodeUuid: string): void {
  e.store.sql.exec(
    `UPDATE episodes SET state = 'registered', queue_seq = ?, client_uuid = '', discard_timeout = -1, expires_at = NULL,
       llm_call_count = 0, last_activity = ?, registered_again = 0 WHERE episode_uuid = ?`,
    e.nextQueueSeq++,
    e.host.now(),
    episodeUuid,
  );
}

/** Deletes an episode that leaves no finished row behind: its fence goes into the floor. */
function dropEpisode(e: EpisodeState, uuid: string): void {
  e.store.sql.exec("DELETE FROM episodes WHERE episode_uuid = ?", uuid);
  e.store.sql.exec("DELETE FROM aborts WHERE episode_uuid = ?", uuid);
  retireFences(e);
}

/**
 * Keeps the highest fence issued in meta once rows that held fences are deleted (rarely: a
 * status change, an unregistered or dropped episode), so that a restarted object still starts
 * new episodes above every fence it issued before.
 */
function retireFences(e: EpisodeState): void {
  const meta = e.store.meta;
  if (e.fenceHigh > meta.fenceFloor) e.store.saveMeta({ ...meta, fenceFloor: e.fenceHigh });
}

