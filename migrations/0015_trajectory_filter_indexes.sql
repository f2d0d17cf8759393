-- Written by hand from drizzle-kit's output, which splits an index's expression at its comma.
DROP INDEX `trajectories_step_idx`;--> statement-breakpoint
DROP INDEX `trajectories_run_idx`;--> statement-breakpoint
CREATE INDEX `trajectories_run_step_ended_idx` ON `trajectories` (`engine`, COALESCE(`run`, 1), `global_step`, `ended_at`, `id`);--> statement-breakpoint
CREATE INDEX `trajectories_step_ended_idx` ON `trajectories` (`engine`,`global_step`,`ended_at`,`id`);--> statement-breakpoint
CREATE INDEX `trajectories_task_ended_idx` ON `trajectories` (`engine`,`task_id`,`ended_at`,`id`);
