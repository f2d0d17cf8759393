-- Written by hand from drizzle-kit's output, which splits an index's expression at its comma.
CREATE INDEX `trajectories_run_ended_idx` ON `trajectories` (`engine`, COALESCE(`run`, 1), `ended_at`, `id`);
