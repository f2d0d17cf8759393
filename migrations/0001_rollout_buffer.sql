CREATE TABLE `buffer_groups` (
	`engine` text NOT NULL,
	`seq` integer NOT NULL,
	`group_id` text NOT NULL,
	`outcome` text NOT NULL,
	`reason` text NOT NULL,
	`stale` integer NOT NULL,
	`sessions` integer NOT NULL,
	`steps` integer NOT NULL,
	`avg_reward` real,
	`min_weight_version` integer,
	`pull_cursor` integer,
	`decided_at` integer NOT NULL,
	PRIMARY KEY(`engine`, `seq`)
);
--> statement-breakpoint
CREATE INDEX `buffer_groups_group_idx` ON `buffer_groups` (`engine`,`group_id`);--> statement-breakpoint
CREATE TABLE `buffer_steps` (
	`engine` text NOT NULL,
	`uid` text NOT NULL,
	`session_id` text NOT NULL,
	`step_index` integer NOT NULL,
	`group_id` text NOT NULL,
	`reward` real NOT NULL,
	`truncated` integer NOT NULL,
	`is_session_completed` integer NOT NULL,
	`weight_version` integer NOT NULL,
	`messages` text NOT NULL,
	`response` text NOT NULL,
	`extra` text NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`engine`, `session_id`, `step_index`)
);
--> statement-breakpoint
CREATE INDEX `buffer_steps_group_idx` ON `buffer_steps` (`engine`,`group_id`);