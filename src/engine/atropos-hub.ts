/**
 * Atropos's trajectory API inside the engine (atroposlib/api/server.py, v0.4.0): the trainer's
 * registration, the environments, scored groups buffered and queued, batches cut and handed
 * out, and the step. Each operation answers what Atropos's server answers, quirks included
 * (its 500s become 500s, its "wait for trainer to start" stays a 200), with the state in the
 * engine's SQLite (atropos-store.ts) so that nothing is lost on a restart. Beyond Atropos: the
 * queue is bounded in groups and in bytes (503), a group larger than the batch is set aside
 * instead of blocking every batch, what keeps batches from being cut is reported (stalls), and
 * each group goes to D1 as a trajectory through the outbox. The Worker has validated and
 * serialized every group.
 */
import type { z } from "zod";
import { AtroposConfig, ATROPOS_RETRY_AFTER_SECONDS, DEFAULT_ATROPOS_CONFIG, MAX_ATROPOS_ENVS, type AtroposOverview, type AtroposRegisterEnv, type AtroposRegistration, type AtroposStall } from "../protocol/atropos";
import * as Answers from "../protocol/atropos-answers";
import type { EngineOp } from "../auth/roles";
import { formatBytes } from "../protocol/limits";
import { withPyFloats } from "../atropos/scored-json";
import { fail, full, ok, type Reply } from "./reply";
import type { OutboxItem } from "./outbox";
import { findGroupsSummingToTarget, grabExact, grabWithMinimumAllocations } from "./atropos-packing";
import { stallsOf } from "./atropos-stalls";
import { AtroposStore, envKey, type AtroposEnv, type AtroposState } from "./atropos-store";

/** Atropos's MIN_ENV_WEIGHT: an env's share of inference never drops below it. */
const MIN_ENV_WEIGHT = 0.01;

/** A scored group as the Worker hands it over: its env_id, its number of sequences, its JSON and that JSON's bytes of UTF-8, and its trajectory record. */
export type AtroposGroup = { env_id: number | null; size: number; payload: string; bytes: number; reward: number | null; summary: string };

/** The calls that take no input. */
export type AtroposPlainRoute = "root" | "info" | "wandb_info" | "batch" | "status" | "latest_example" | "reset_data" | "config";

export type AtroposCall =
  | { route: "register"; body: AtroposRegistration }
  | { route: AtroposPlainRoute }
  | { route: "register_env"; body: AtroposRegisterEnv }
  | { route: "disconnect_env" | "status_env"; body: { env_id: number } }
  | { route: "scored_data"; groups: AtroposGroup[]; list: boolean }
  | { route: "configure"; body: Partial<AtroposConfig> };

/** The operation (and so the roles: auth/roles.ts) each call needs. */
export function atroposOp(route: AtroposCall["route"]): EngineOp {
  switch (route) {
    case "register":
    case "batch":
    case "reset_data":
    case "configure":
      return "atropos_trainer";
    case "register_env":
    case "disconnect_env":
    case "scored_data":
      return "atropos_env";
    default:
      return "atropos_read";
  }
}

/** A JSON answer (its text), one of Atropos's plain-text ones, or a batch taken for its answer to be streamed (atropos-batch-stream.ts). */
export type AtroposAnswer = { raw: string } | { text: string; status: 200 | 500 } | { taken: number };
/** What the Worker gets: a taken batch's answer as a stream of its JSON. */
export type AtroposSent = Exclude<AtroposAnswer, { taken: number }> | { stream: ReadableStream<Uint8Array> };

/** An answer of the type its schema gives (protocol/atropos-answers.ts, which the OpenAPI document describes). */
const json = <S extends z.ZodType>(_answer: S, v: z.output<S>): AtroposAnswer => ({ raw: JSON.stringify(v) });

/** What Starlette answers when a handler raises (an IndexError, a ZeroDivisionError...). */
const SERVER_ERROR: AtroposAnswer = { text: Answers.ATROPOS_SERVER_ERROR_TEXT, status: 500 };

/** `list[i]` as Python reads it: a negative index counts from the end. */
function pyIndex<T>(list: readonly T[], i: number): T | undefined {
  return list[i < 0 ? list.length + i : i];
}

export type AtroposHost = {
  engine(): string;
  incarnation(): string;
  run(): number;
  now(): number;
  outbox(item: OutboxItem): void;
};

export class AtroposHub {
  readonly store: AtroposStore;
  /** Taken batches whose answers are being streamed by this object now. */
  readonly sending = new Set<number>();

  constructor(
    sql: SqlStorage,
    private readonly kv: { get<T>(k: string): T | null; set(k: string, v: unknown): void },
    private readonly host: AtroposHost,
  ) {
    this.store = new AtroposStore(sql, kv);
  }

  config(): AtroposConfig {
    return { ...DEFAULT_ATROPOS_CONFIG, ...(this.kv.get<Partial<AtroposConfig>>("atropos_config") ?? {}) };
  }

  /** Answers one call; its writes run in the caller's transaction. */
  handle(call: AtroposCall): Reply<AtroposAnswer> {
    const s = this.store.state();
    switch (call.route) {
      case "root":
        return ok(json(Answers.AtroposRoot, { message: "AtroposLib API" }));
      case "register":
        return ok(this.register(s, call.body));
      case "info":
        return ok(json(Answers.AtroposInfo, s.registered ? { batch_size: s.batch_size, max_token_len: s.max_token_len ?? -1 } : { batch_size: -1, max_token_len: -1 }));
      case "wandb_info":
        return ok(json(Answers.AtroposWandbInfo, { group: s.group, project: s.project }));
      case "register_env": {
        const r = this.registerEnv(s, call.body);
        return r.ok ? ok(json(Answers.AtroposEnvRegistered, r.body)) : r;
      }
      case "disconnect_env":
        return ok(json(Answers.AtroposEnvDisconnected, this.disconnectEnv(s, call.body.env_id)));
      case "batch":
        return ok(this.batch(s));
      case "latest_example":
        return ok(this.latest(s));
      case "scored_data":
        return this.scored(s, call.groups, call.list);
      case "status":
        return ok(json(Answers.AtroposStatus, this.status(s)));
      case "status_env":
        return ok(this.statusEnv(s, call.body.env_id));
      case "reset_data":
        this.reset(s);
        return ok({ text: Answers.ATROPOS_RESET_TEXT, status: 200 });
      case "config":
        return ok(json(AtroposConfig, this.config()));
      case "configure": {
        const next = { ...this.config(), ...call.body };
        this.kv.set("atropos_config", next);
        return ok(json(AtroposConfig, next));
      }
    }
  }

  private register(s: AtroposState, r: AtroposRegistration): AtroposAnswer {
    let next = s;
    if (!s.queue) {
      next = {
        ...s,
        queue: true,
        registered: true,
        group: r.wandb_group,
        project: r.wandb_project,
        batch_size: r.batch_size,
        max_token_len: r.max_token_len,
        step: r.starting_step,
        checkpoint_dir: r.checkpoint_dir,
        save_checkpoint_interval: r.save_checkpoint_interval,
        num_steps: r.num_steps,
        started: false,
        stored: 0,
      };
      next = { ...next, stored_bytes: s.stored_bytes - this.store.clear(s.latest) };
    }
    this.store.saveState({ ...next, requesters: next.requesters + 1 });
    // uuid.uuid4().int: a 128-bit integer, written as a JSON number with every digit, as Python's json writes it.
    return { raw: `{"uuid":${uuid4Int()}}` };
  }

  private registerEnv(s: AtroposState, r: AtroposRegisterEnv): Reply<z.output<typeof Answers.AtroposEnvRegistered>> {
    if (s.started !== true) return ok({ status: "wait for trainer to start" });
    const envs = this.store.envs();
    // Atropos appends envs without end and an env's id is its place in the list, so none can be
    // dropped or reused while the run goes on: they go with the run's queue, by /reset_data
    // (a /register clears them only when there is no queue, which no env outlives).
    if (envs.length >= MAX_ATROPOS_ENVS) {
      return fail(
        422,
        "too_many_environments",
        `This engine has ${envs.length} Atropos environments registered, the most it takes (${MAX_ATROPOS_ENVS}); they stay, as Atropos keeps them, until the trainer's GET /reset_data clears them with the run's queue (a /register does not).`,
      );
    }
    const realName = `${r.desired_name}_${envs.filter((e) => e.desired_name === r.desired_name).length}`;
    const id = envs.length;
    this.store.addEnv({
      env_id: id,
      desired_name: r.desired_name,
      real_name: realName,
      max_context_len: r.max_token_length,
      weight: r.weight,
      group_size: r.group_size,
      min_batch_allocation: r.min_batch_allocation ?? null,
      connected: true,
      last_update: this.host.now() / 1000,
    });
    return ok({
      status: "success",
      env_id: id,
      wandb_name: realName,
      checkpoint_dir: s.checkpoint_dir,
      starting_step: s.step,
      checkpoint_interval: s.save_checkpoint_interval,
      num_steps: s.num_steps,
    });
  }

  private disconnectEnv(s: AtroposState, envId: number): z.output<typeof Answers.AtroposEnvDisconnected> {
    if (!s.registered) return { status: "failure", error: "'State' object has no attribute 'envs'" };
    const env = pyIndex(this.store.envs(), envId);
    if (env === undefined) return { status: "failure", error: "list index out of range" };
    this.store.updateEnv(env.env_id, { connected: false });
    return { status: "success" };
  }

  private batch(s: AtroposState): AtroposAnswer {
    if (s.started === null) return json(Answers.AtroposBatch, { status: "error", message: "Trainer not registered. Call /register first.", batch: [] });
    let next: AtroposState = { ...s, started: true };
    next = { ...next, stored_bytes: next.stored_bytes - this.store.dropAbandoned(this.sending, s.latest) };
    let taken = this.store.takeBatch();
    if (taken === null && !s.queue) {
      // Atropos marks itself started, then fails on the queue /reset_data deleted.
      this.store.saveState(next);
      return SERVER_ERROR;
    }
    if (taken === null) {
      const cut = this.cutAll(next);
      next = { ...next, step: next.step + cut, next_batch: next.next_batch + cut };
      taken = cut === 0 ? null : this.store.takeBatch();
    }
    if (taken !== null) next = { ...next, stored: next.stored - taken.n };
    this.store.saveState(next);
    if (taken === null) return json(Answers.AtroposBatch, { batch: null });
    this.sending.add(taken.taken);
    return { taken: taken.taken };
  }

  /** The next payloads of a taken batch's answer, from position `from` (about a mebibyte at a time). */
  takenChunk(taken: number, from: number): { pos: number; payload: string }[] {
    return this.store.takenPayloads(taken, from, 1 << 20);
  }

  /** A taken batch's answer is sent, or its reader went: its rows go, and their bytes with them. */
  finishTaken(taken: number): void {
    this.sending.delete(taken);
    const s = this.store.state();
    const freed = this.store.dropTaken(taken, s.latest);
    if (freed > 0) this.store.saveState({ ...s, stored_bytes: s.stored_bytes - freed });
  }

  /** Cuts every batch the queue holds, as Atropos does when its list of cut batches is empty; returns how many. */
  private cutAll(s: AtroposState): number {
    const b = s.batch_size;
    // A group larger than the batch would stop every batch once it came first: it is set aside (and reported) instead.
    if (b > 0) this.store.holdLargerThan(b);
    const envs = this.store.envs();
    const withMinimums = envs.some((e) => e.min_batch_allocation !== null);
    const packing = envs.map((e) => ({ id: e.env_id, connected: e.connected, min: e.min_batch_allocation }));
    let cut = 0;
    for (;;) {
      const ids = withMinimums ? grabWithMinimumAllocations(this.store, b, packing) : grabExact(this.store, b);
      if (ids === null) return cut;
      this.store.cut(s.next_batch + cut, ids);
      cut++;
    }
  }

  private latest(s: AtroposState): AtroposAnswer {
    const payload = s.latest === null ? null : this.store.latestPayload(s.latest);
    if (payload !== null) return { raw: payload };
    return json(Answers.AtroposNoExample, { tokens: [], masks: [], scores: [], advantages: [], ref_logprobs: [], generation_params: [], inference_logprobs: [], messages: [], images: [] });
  }

  private scored(s: AtroposState, groups: AtroposGroup[], list: boolean): Reply<AtroposAnswer> {
    // Atropos creates its queue in the loop over the groups: an empty list leaves no queue behind
    // (so a trainer's /register after it still takes effect), stores nothing, and so is no reason for a 503.
    if (groups.length === 0) return ok(json(Answers.AtroposScoredListReceived, { status: "received", groups_processed: 0 }));
    const config = this.config();
    const max = config.max_groups;
    const bytes = groups.reduce((a, g) => a + g.bytes, 0);
    const maxBytes = config.max_stored_bytes;
    // More than a bound alone, by count or by bytes: no batch taken makes room for them, so they
    // are a 413 before any 503 (which BaseEnv tries three times in all, to no end here).
    if (groups.length > max) {
      return fail(413, "payload_too_large", `These ${groups.length} scored groups are more than this engine holds (${max}, max_groups): send fewer groups per request.`);
    }
    if (bytes > maxBytes) {
      const what = groups.length === 1 ? "This scored group is" : `These ${groups.length} scored groups are`;
      return fail(413, "payload_too_large", `${what} ${formatBytes(bytes)} as JSON; this engine holds at most ${formatBytes(maxBytes)} of Atropos groups (max_stored_bytes): send fewer groups per request.`);
    }
    if (s.stored + groups.length > max) {
      return full("queue_full", `This engine holds ${s.stored} Atropos groups and takes at most ${max} (max_groups): retry once the trainer has taken batches.`, ATROPOS_RETRY_AFTER_SECONDS);
    }
    const envs = s.registered ? this.store.envs() : [];
    // The latest example's row stays after its batch is taken and goes only when a newer group
    // is queued: counted against a request that queues one, it would refuse the one thing that
    // frees it, for ever once every batch is taken. So the bound is on what the store holds once
    // the request is stored. Looked at only when the bound would refuse: it reads the buffers.
    if (s.stored_bytes + bytes > maxBytes && s.stored_bytes - this.latestFreedBy(s, groups, envs) + bytes > maxBytes) {
      return full(
        "queue_full",
        `This engine holds ${formatBytes(s.stored_bytes)} of Atropos groups and takes at most ${formatBytes(maxBytes)} (max_stored_bytes); ${groups.length === 1 ? "this group is" : "these groups are"} ${formatBytes(bytes)}: retry once the trainer has taken batches.`,
        ATROPOS_RETRY_AFTER_SECONDS,
      );
    }
    // Python's envs[env_id]: a negative id counts from the end, and one below -len(envs) raises (before anything is stored, here).
    if (groups.some((g) => g.env_id !== null && g.env_id < -envs.length)) return ok(SERVER_ERROR);
    let next: AtroposState = { ...s, queue: true };
    let buffered = 0;
    let lastBufferSize: number | null = null;
    const now = this.host.now();
    for (const g of groups) {
      const env = envOf(envs, g);
      const key = envKey(g.env_id);
      let added: { id: number; bytes: number };
      if (env !== undefined && g.size !== env.group_size) {
        added = this.store.add(key, g.size, "buffer", g.payload);
        const buffer = this.store.buffered(key);
        const picked = findGroupsSummingToTarget(
          buffer.map((r) => r.size),
          env.group_size,
        );
        let latest: number | null = null;
        for (const i of picked) latest = this.store.enqueueBuffered(buffer[i]!.id);
        if (latest !== null) next = this.withLatest(next, latest);
        const pickedSet = new Set(picked);
        buffered++;
        lastBufferSize = buffer.reduce((a, r, i) => (pickedSet.has(i) ? a : a + r.size), 0);
      } else {
        added = this.store.add(key, g.size, "queue", g.payload);
        next = this.withLatest(next, added.id);
      }
      next = { ...next, stored: next.stored + 1, stored_bytes: next.stored_bytes + added.bytes };
      this.record(g, added.id, env, now, next.step);
    }
    this.store.saveState(next);
    if (!list) return ok(json(Answers.AtroposScoredReceived, lastBufferSize !== null ? { status: "buffered", buffer_size: lastBufferSize } : { status: "received" }));
    const answer: z.output<typeof Answers.AtroposScoredListReceived> = { status: "received", groups_processed: groups.length };
    if (buffered > 0) {
      answer.buffered = buffered;
      if (lastBufferSize !== null) answer.last_buffer_size = lastBufferSize;
    }
    return ok(json(Answers.AtroposScoredListReceived, answer));
  }

  private withLatest(s: AtroposState, id: number): AtroposState {
    return { ...s, latest: id, stored_bytes: s.stored_bytes - this.store.setLatest(s.latest) };
  }

  /**
   * The bytes storing `groups` would free before it is done: the latest example's row, if it is
   * kept as that alone and one of the groups joins the queue (every withLatest in scored): one
   * for an env it does not buffer for, or one whose buffering makes the env's group size.
   * Buffering is played as scored plays it, up to the first group queued; a request whose every
   * group waits in a buffer frees nothing.
   */
  private latestFreedBy(s: AtroposState, groups: readonly AtroposGroup[], envs: readonly AtroposEnv[]): number {
    if (s.latest === null) return 0;
    const bytes = this.store.latestOnlyBytes(s.latest);
    // Such a request is Atropos's 500 and stores nothing (scored), so it frees nothing either.
    if (bytes === null || groups.some((g) => g.env_id !== null && g.env_id < -envs.length)) return 0;
    const buffers = new Map<string, number[]>();
    for (const g of groups) {
      const env = envOf(envs, g);
      if (env === undefined || g.size === env.group_size) return bytes;
      const key = envKey(g.env_id);
      let sizes = buffers.get(key);
      if (sizes === undefined) {
        sizes = this.store.buffered(key).map((r) => r.size);
        buffers.set(key, sizes);
      }
      sizes.push(g.size);
      if (findGroupsSummingToTarget(sizes, env.group_size).length > 0) return bytes;
    }
    return 0;
  }

  /** The group's trajectory row for D1, written through the outbox in this transaction. */
  private record(g: AtroposGroup, id: number, env: AtroposEnv | undefined, now: number, step: number): void {
    this.host.outbox({
      kind: "trajectory",
      row: {
        engine: this.host.engine(),
        episodeUuid: `atropos-${this.host.incarnation() || "0"}-${id}`,
        fence: 0,
        clientUuid: env?.real_name ?? (g.env_id === null ? "atropos" : `atropos-env-${g.env_id}`),
        taskId: env?.desired_name ?? "",
        episodeType: "train",
        globalStep: step,
        run: this.host.run(),
        reward: g.reward,
        isSuccess: null,
        workflowOutput: g.summary,
        endedAt: now,
        outcome: "ended",
      },
    });
  }

  private status(s: AtroposState): z.output<typeof Answers.AtroposStatus> {
    const stalls = this.stalls(s);
    if (!s.registered || !s.queue) return { current_step: 0, queue_size: 0, stalls };
    return { current_step: s.step, queue_size: this.queued(), stalls };
  }

  private queued(): number {
    return this.store.classes().reduce((a, c) => a + c.n, 0);
  }

  private statusEnv(s: AtroposState, envId: number): AtroposAnswer {
    if (!s.registered) return SERVER_ERROR;
    const envs = this.store.envs();
    const env = pyIndex(envs, envId);
    if (env === undefined) return SERVER_ERROR;
    const total = envs.filter((e) => e.connected).reduce((a, e) => a + e.max_context_len * Math.max(0, e.weight), 0);
    if (total === 0) return SERVER_ERROR;
    const envWeight = Math.max(MIN_ENV_WEIGHT, (env.max_context_len * env.weight) / total);
    let totalMin = 0;
    for (const e of envs) if (e.connected && e.min_batch_allocation !== null) totalMin += e.min_batch_allocation;
    const unallocated = 1 - Math.min(totalMin, 1);
    const classes = s.queue ? this.store.classes() : [];
    const self = String(envId);
    let maxGroup = 1;
    let groupSize = env.group_size;
    let selfSeqs = 0;
    const byEnv = new Map<string, number>();
    for (const c of classes) {
      if (c.size > maxGroup) maxGroup = c.size;
      if (c.env === self) {
        groupSize = Math.max(groupSize, c.size);
        selfSeqs += c.size * c.n;
      } else {
        byEnv.set(c.env, (byEnv.get(c.env) ?? 0) + c.size * c.n);
      }
    }
    // Atropos keeps the largest group size it has seen queued for the env as its group size.
    if (groupSize !== env.group_size) this.store.updateEnv(env.env_id, { group_size: groupSize });
    const minByEnv = new Map<string, number>();
    for (const e of envs) if (e.connected && e.min_batch_allocation !== null) minByEnv.set(String(e.env_id), Math.trunc(s.batch_size * e.min_batch_allocation));
    let available = 0;
    if (maxGroup > 1) for (const [key, seqs] of byEnv) available += Math.max(0, Math.ceil(seqs / maxGroup) * maxGroup - (minByEnv.get(key) ?? 0));
    if (groupSize === 0) return SERVER_ERROR;
    const answer: z.output<typeof Answers.AtroposEnvStatus> = {
      current_step: s.step,
      queue_size: Math.floor((selfSeqs + available) / groupSize),
      unallocated_fraction: unallocated,
      self_queue_size: Math.floor(selfSeqs / groupSize),
      max_group_size: maxGroup,
      env_weight: envWeight,
    };
    // Atropos's weight and fraction are Python floats: a whole one is written 1.0.
    return { raw: withPyFloats(answer, ["unallocated_fraction", "env_weight"]) };
  }

  private reset(s: AtroposState): void {
    // Atropos deletes its queue first; with none there, its KeyError ends the reset there and then.
    if (!s.queue) return;
    const freed = this.store.clear(s.latest) + this.store.dropAbandoned(this.sending, s.latest);
    this.store.saveState({
      ...s,
      queue: false,
      group: null,
      project: null,
      batch_size: -1,
      num_steps: -1,
      step: 0,
      started: false,
      requesters: 0,
      stored: 0,
      stored_bytes: s.stored_bytes - freed,
    });
  }

  /** The engine's views of this API: counts from the tables' counters, no pass over the queue. */
  overview(): AtroposOverview {
    const s = this.store.state();
    const config = this.config();
    return {
      registered: s.registered,
      current_step: s.step,
      batch_size: s.batch_size,
      queued_groups: this.queued(),
      stored_groups: s.stored,
      max_groups: config.max_groups,
      stored_bytes: s.stored_bytes,
      max_stored_bytes: config.max_stored_bytes,
      environments: s.registered ? this.store.envs().length : 0,
      stalls: this.stalls(s),
    };
  }

  /** What keeps groups from ever being taken (atropos-stalls.ts), from the counts: no pass over the queue. */
  stalls(s: AtroposState = this.store.state()): AtroposStall[] {
    return stallsOf({
      batchSize: s.batch_size,
      held: this.store.held(),
      queued: this.store.classes(),
      buffered: this.store.bufferedClasses(),
      envs: s.registered ? this.store.envs() : [],
    });
  }
}

/** The registered env a group is for, as Atropos's envs[env_id] finds it (a negative id counting from the end); undefined for none. */
function envOf(envs: readonly AtroposEnv[], g: AtroposGroup): AtroposEnv | undefined {
  return g.env_id !== null && g.env_id < envs.length ? pyIndex(envs, g.env_id) : undefined;
}

/** A random 128-bit integer in decimal, as uuid.uuid4().int (the version and variant bits set as uuid4 sets them). */
function uuid4Int(): string {
  const hex = crypto.randomUUID().replace(/-/g, "");
  return BigInt(`0x${hex}`).toString();
}
