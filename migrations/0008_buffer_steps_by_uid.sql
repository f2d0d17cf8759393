CREATE TABLE `__new_buffer_steps` (
	`engine` text NOT NULL,
	`uid` text NOT NULL,
	`session_id` text NOT NULL,
	`step_index` integer NOT NULL,
	`group_id` text NOT NULL,
	`run` integer,
	`reward` real NOT NULL,
	`truncated` integer NOT NULL,
	`is_session_completed` integer NOT NULL,
	`weight_version` integer NOT NULL,
	`messages` text NOT NULL,
	`response` text NOT NULL,
	`extra` text NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`engine`, `uid`)
);
--> statement-breakpoint
INSERT INTO `__new_buffer_steps`("engine", "uid", "session_id", "step_index", "group_id", "run", "reward", "truncated", "is_session_completed", "weight_version", "messages", "response", "extra", "created_at") SELECT "engine", "uid", "session_id", "step_index", "group_id", "run", "reward", "truncated", "is_session_completed", "weight_version", "messages", "response", "extra", "created_at" FROM `buffer_steps`;--> statement-breakpoint
DROP TABLE `buffer_steps`;--> statement-breakpoint
ALTER TABLE `__new_buffer_steps` RENAME TO `buffer_steps`;--> statement-breakpoint
CREATE INDEX `buffer_steps_group_idx` ON `buffer_steps` (`engine`,`group_id`);