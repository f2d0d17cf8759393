CREATE TABLE `archives` (
	`name` text PRIMARY KEY NOT NULL,
	`from_engine` text NOT NULL,
	`body_prefix` text,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `archives_from_engine_idx` ON `archives` (`from_engine`);--> statement-breakpoint
-- Written by hand: the archives made before this table, backfilled. Each history table is read by
-- stepping through its engine index from one name to the next (a seek per distinct name, not a
-- scan of its rows); the names with "@" (in no engine's name) are archives. An archive's calls are
-- all of one incarnation, so one call's body key names its prefix, ledger/<engine>/<incarnation>/.
WITH RECURSIVE
  t(name) AS (
    SELECT (SELECT engine FROM trajectories ORDER BY engine LIMIT 1)
    UNION ALL SELECT (SELECT engine FROM trajectories WHERE engine > t.name ORDER BY engine LIMIT 1) FROM t WHERE t.name IS NOT NULL
  ),
  c(name) AS (
    SELECT (SELECT engine FROM llm_calls ORDER BY engine LIMIT 1)
    UNION ALL SELECT (SELECT engine FROM llm_calls WHERE engine > c.name ORDER BY engine LIMIT 1) FROM c WHERE c.name IS NOT NULL
  ),
  h(name) AS (
    SELECT (SELECT engine FROM reward_history ORDER BY engine LIMIT 1)
    UNION ALL SELECT (SELECT engine FROM reward_history WHERE engine > h.name ORDER BY engine LIMIT 1) FROM h WHERE h.name IS NOT NULL
  ),
  r(name) AS (
    SELECT (SELECT engine FROM runs ORDER BY engine LIMIT 1)
    UNION ALL SELECT (SELECT engine FROM runs WHERE engine > r.name ORDER BY engine LIMIT 1) FROM r WHERE r.name IS NOT NULL
  ),
  i(name) AS (
    SELECT (SELECT engine FROM inference_tests ORDER BY engine LIMIT 1)
    UNION ALL SELECT (SELECT engine FROM inference_tests WHERE engine > i.name ORDER BY engine LIMIT 1) FROM i WHERE i.name IS NOT NULL
  ),
  named(name) AS (SELECT name FROM t UNION SELECT name FROM c UNION SELECT name FROM h UNION SELECT name FROM r UNION SELECT name FROM i),
  archived(name, from_engine, root, body_key) AS (
    SELECT name, substr(name, 1, instr(name, '@') - 1), 'ledger/' || substr(name, 1, instr(name, '@') - 1) || '/',
      (SELECT body_key FROM llm_calls WHERE engine = named.name LIMIT 1)
    FROM named WHERE instr(name, '@') > 1
  )
INSERT INTO `archives` (`name`, `from_engine`, `body_prefix`, `created_at`)
SELECT name, from_engine,
  CASE WHEN substr(body_key, 1, length(root)) = root AND instr(substr(body_key, length(root) + 1), '/') > 0
    THEN substr(body_key, 1, length(root) + instr(substr(body_key, length(root) + 1), '/')) END,
  CAST(substr(name, instr(name, '@') + 1) AS INTEGER)
FROM archived;
