/**
 * Turns the Worker's wrangler.toml into Miniflare 5 worker options, read with wrangler's own
 * config parser so names, ids and Durable Object storage match a deployment. Only the binding
 * kinds this project uses are served; any other kind is refused by name rather than left out.
 */
import { dirname, resolve } from "node:path";
import type { MiniflareOptions } from "miniflare";
import {
  unstable_convertConfigBindingsToStartWorkerBindings,
  unstable_getDurableObjectClassNameToUseSQLiteMap,
  unstable_readConfig,
} from "wrangler";

type WorkerConfig = MiniflareOptions["workers"][number]["config"];
type Env = NonNullable<WorkerConfig["env"]>;
type Exports = NonNullable<WorkerConfig["exports"]>;

/** A binding as wrangler's config lists it: the fields this file reads. */
type ConfigBinding = {
  type: string;
  value?: unknown;
  preview_database_id?: string;
  migrations_dir?: string;
  migrations_table?: string;
  class_name?: string;
  script_name?: string;
  namespace_id?: string;
  simple?: { limit: number; period?: number };
  bucket_name?: string;
};

export type D1Migrations = { binding: string; dir: string; table: string | undefined };

export type WorkerSetup = {
  name: string;
  /** The entry point wrangler bundles. */
  main: string;
  /** Everything but the code (`manifest`) and the secrets, which the caller adds. */
  config: Omit<WorkerConfig, "manifest">;
  d1Migrations: D1Migrations[];
  /** The `[[ratelimits]]` bindings, kept out of `config.env`: the caller decides whether to serve them. */
  rateLimits: Env;
};

/**
 * The id the local D1 database of a binding is kept under (Miniflare names its SQLite file after
 * it): `preview_database_id` if set, as `wrangler dev` does, else a fixed one, never
 * `database_id`. That one is for deploying: docs/deploy.md has it replaced with the real id,
 * and keying local state by it would leave `.local/state` with an empty D1 beside Durable
 * Objects that still hold the old engines. The fixed id is wrangler.toml's placeholder
 * database_id, under which every `.local/state` made before was kept. One fixed id serves one
 * binding only: two would share a database.
 */
export const LOCAL_D1_ID = "00000000-0000-0000-0000-000000000000";

function localD1Ids(configPath: string, bindings: Record<string, ConfigBinding>): Map<string, string> {
  const ids = new Map<string, string>();
  for (const [binding, b] of Object.entries(bindings)) {
    if (b.type === "d1") ids.set(binding, b.preview_database_id ?? LOCAL_D1_ID);
  }
  const fixed = [...ids].filter(([, id]) => id === LOCAL_D1_ID).map(([binding]) => binding);
  if (fixed.length > 1) {
    throw new Error(`${configPath}: D1 bindings ${fixed.join(", ")} would share one local database: give all but one a preview_database_id (it names the local one)`);
  }
  return ids;
}

export function readWorkerSetup(configPath: string): WorkerSetup {
  const config = unstable_readConfig({ config: configPath });
  const name: string = config.name;
  const main: string | undefined = config.main;
  if (!name || !main) throw new Error(`${configPath} must name the Worker (name) and its entry point (main)`);
  const sqlite: Map<string, boolean> = unstable_getDurableObjectClassNameToUseSQLiteMap(config.migrations);
  const bindings = unstable_convertConfigBindingsToStartWorkerBindings(config) as Record<string, ConfigBinding>;
  const d1Ids = localD1Ids(configPath, bindings);

  const env: Env = {};
  const exports: Exports = {};
  const d1Migrations: D1Migrations[] = [];
  const rateLimits: Env = {};
  for (const [binding, b] of Object.entries(bindings)) {
    if (b.type === "plain_text") {
      env[binding] = { type: "text", value: String(b.value) };
    } else if (b.type === "json") {
      env[binding] = { type: "json", value: b.value as never };
    } else if (b.type === "d1") {
      env[binding] = { type: "d1", id: d1Ids.get(binding)! };
      d1Migrations.push({ binding, dir: resolve(dirname(configPath), b.migrations_dir ?? "migrations"), table: b.migrations_table });
    } else if (b.type === "r2_bucket") {
      env[binding] = { type: "r2", name: b.bucket_name ?? binding };
    } else if (b.type === "durable_object_namespace" && b.class_name && !b.script_name) {
      env[binding] = { type: "durable-object", worker: name, exportName: b.class_name };
      exports[b.class_name] = { type: "durable-object", storage: sqlite.get(b.class_name) ? "sqlite" : "legacy-kv" };
    } else if (b.type === "ratelimit" && b.simple) {
      // Miniflare counts them in a Durable Object of its own, in fixed windows of the wall clock.
      const period = b.simple.period ?? 60;
      if (period !== 10 && period !== 60) throw new Error(`${configPath}: ratelimit ${binding} has period ${period}; Cloudflare takes 10 or 60`);
      rateLimits[binding] = { type: "rate-limit", namespace: b.namespace_id ?? binding, simple: { limit: b.simple.limit, period } };
    } else {
      throw new Error(`${configPath}: binding ${binding} (${b.type}) is not served locally yet; add it in scripts/local/worker-config.ts`);
    }
  }
  const worker = {
    name,
    compatibilityDate: config.compatibility_date as string,
    compatibilityFlags: config.compatibility_flags as string[],
    env,
    exports,
  };
  return { name, main, config: worker, d1Migrations, rateLimits };
}
