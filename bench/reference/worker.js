/**
 * The limit reference: the least a Worker + SQLite Durable Object can do on the engine's hot
 * paths. Same paths, bodies, bearer header and answer shapes as the real exchange, but no
 * framework, no schema validation, no token check beyond "a bearer header is present", and
 * exactly this storage work:
 *   claim_episode:    one indexed SQLite read (the FIFO head) + one write (mark it claimed)
 *   end_episode:      one write (delete the claimed row)
 *   register_episode: one insert
 * The Worker forwards to the engine's Durable Object by RPC, as the real Worker does.
 * Plain JavaScript so Miniflare serves it without a bundler.
 *
 * As the issue defines it, every claim, end and register commits on its own. With the binding
 * GROUP_COMMIT = "1" (`npm run bench -- --reference-group-commit`) it waits for a shared turn
 * first, as the engine does (src/engine/shared-turn.ts), so the two can also be compared with
 * the same commit strategy: the engine's own work, with the group commit's gain taken out.
 */
import { DurableObject } from "cloudflare:workers";

const NO_EPISODES = "No available episodes to claim. Try again (maybe 1 minute) later.";

export class ReferenceEngine extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(`
      CREATE TABLE IF NOT EXISTS episodes (
        episode_uuid TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        queue_seq INTEGER,
        client_uuid TEXT NOT NULL DEFAULT ''
      );
      CREATE INDEX IF NOT EXISTS episodes_queue ON episodes (queue_seq) WHERE state = 'registered';
      CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v TEXT NOT NULL);
    `);
    // Read once per instance (an idle object is evicted and rebuilt), then served from memory.
    this.status = this.sql.exec("SELECT v FROM kv WHERE k = 'status'").toArray()[0]?.v ?? "ENGINE.OFFLINE";
    this.seq = this.sql.exec("SELECT COALESCE(MAX(queue_seq), 0) AS s FROM episodes").one().s;
    this.waiting = [];
  }

  /** The engine's SharedTurn, inline: resolves at the start of the next turn a 0 ms timer starts. */
  turn() {
    return new Promise((resolve) => {
      if (this.waiting.push(resolve) > 1) return;
      setTimeout(() => {
        const group = this.waiting;
        this.waiting = [];
        for (const r of group) r();
      }, 0);
    });
  }

  /** With GROUP_COMMIT only (so the reference runs exactly as before): op in a shared turn. */
  async grouped(op, body, origin) {
    await this.turn();
    return op === "claim" ? this.claim(body, origin) : op === "end" ? this.end(body) : this.register(body);
  }

  updateStatus(body) {
    this.status = String(body.engine_status ?? "");
    this.sql.exec("INSERT OR REPLACE INTO kv (k, v) VALUES ('status', ?)", this.status);
    return { success: true, failure_reason: "" };
  }

  register(body) {
    if (this.status !== "ENGINE.ROLLING") return { success: false, failure_reason: "Engine is not in rolling state. Cannot register episode." };
    this.sql.exec("INSERT INTO episodes (episode_uuid, state, queue_seq) VALUES (?, 'registered', ?)", body.episode_uuid, ++this.seq);
    return { success: true, failure_reason: "" };
  }

  claim(body, origin) {
    const head = this.sql.exec("SELECT episode_uuid FROM episodes WHERE state = 'registered' ORDER BY queue_seq LIMIT 1").toArray()[0];
    if (!head) {
      return { success: false, client_uuid: body.client_uuid, episode_uuid: "", openai_base_url: "", openai_api_key: "", fail_cause: NO_EPISODES };
    }
    this.sql.exec("UPDATE episodes SET state = 'claimed', queue_seq = NULL, client_uuid = ? WHERE episode_uuid = ?", body.client_uuid, head.episode_uuid);
    return {
      success: true,
      client_uuid: body.client_uuid,
      episode_uuid: head.episode_uuid,
      openai_base_url: `${origin}/v1`,
      openai_api_key: "sk-reference",
      fail_cause: "",
    };
  }

  end(body) {
    this.sql.exec("DELETE FROM episodes WHERE episode_uuid = ? AND state = 'claimed'", body.episode_uuid);
    return { success: true };
  }

  poolInfo() {
    return { engine_status: this.status };
  }
}

const json = (body, status = 200) => new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const m = /^\/e\/([^/]+)\/([a-z_]+)$/.exec(url.pathname);
    if (!m) return json({ error: "not_found", detail: url.pathname }, 404);
    if (!/^Bearer\s+\S+/i.test(request.headers.get("authorization") ?? "")) return json({ error: "missing_token", detail: "bearer header required" }, 401);
    const stub = env.ENGINE.get(env.ENGINE.idFromName(m[1]));
    const op = m[2];
    const grouped = env.GROUP_COMMIT === "1";
    if (request.method === "GET" && op === "get_current_batch_rollout_pool_information") return json(await stub.poolInfo());
    if (request.method !== "POST") return json({ error: "not_found", detail: url.pathname }, 404);
    const body = await request.json();
    switch (op) {
      case "claim_episode":
        return json(await (grouped ? stub.grouped("claim", body, url.origin) : stub.claim(body, url.origin)));
      case "end_episode":
        return json(await (grouped ? stub.grouped("end", body) : stub.end(body)));
      case "register_episode":
        return json(await (grouped ? stub.grouped("register", body) : stub.register(body)));
      case "update_engine_status":
        return json(await stub.updateStatus(body));
      default:
        return json({ error: "not_found", detail: url.pathname }, 404);
    }
  },
};
