ALTER TABLE `buffer_groups` ADD `run` integer;--> statement-breakpoint
ALTER TABLE `buffer_steps` ADD `run` integer;--> statement-breakpoint
ALTER TABLE `reward_history` ADD `run` integer;--> statement-breakpoint
ALTER TABLE `trajectories` ADD `run` integer;--> statement-breakpoint
CREATE INDEX `trajectories_run_idx` ON `trajectories` (`engine`,`run`,`global_step`);
