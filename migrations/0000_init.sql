CREATE TABLE `engines` (
	`name` text PRIMARY KEY NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `reward_history` (
	`engine` text NOT NULL,
	`seq` integer NOT NULL,
	`global_step` integer NOT NULL,
	`mean_reward` real NOT NULL,
	`std_reward` real NOT NULL,
	`count` integer NOT NULL,
	`min_reward` real NOT NULL,
	`max_reward` real NOT NULL,
	`timestamp` real NOT NULL,
	PRIMARY KEY(`engine`, `seq`)
);
--> statement-breakpoint
CREATE TABLE `tokens` (
	`id` text PRIMARY KEY NOT NULL,
	`engine` text NOT NULL,
	`role` text NOT NULL,
	`token_hash` text NOT NULL,
	`label` text DEFAULT '' NOT NULL,
	`created_at` integer NOT NULL,
	`revoked_at` integer,
	FOREIGN KEY (`engine`) REFERENCES `engines`(`name`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `tokens_hash_idx` ON `tokens` (`token_hash`);--> statement-breakpoint
CREATE INDEX `tokens_engine_idx` ON `tokens` (`engine`);--> statement-breakpoint
CREATE TABLE `trajectories` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`engine` text NOT NULL,
	`episode_uuid` text NOT NULL,
	`fence` integer NOT NULL,
	`client_uuid` text NOT NULL,
	`task_id` text NOT NULL,
	`episode_type` text NOT NULL,
	`global_step` integer,
	`reward` real,
	`is_success` integer,
	`workflow_output` text NOT NULL,
	`ended_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `trajectories_claim_idx` ON `trajectories` (`engine`,`episode_uuid`,`fence`);--> statement-breakpoint
CREATE INDEX `trajectories_step_idx` ON `trajectories` (`engine`,`global_step`);