CREATE TABLE `llm_calls` (
	`engine` text NOT NULL,
	`call_id` text NOT NULL,
	`episode_uuid` text NOT NULL,
	`fence` integer NOT NULL,
	`run` integer NOT NULL,
	`client_uuid` text NOT NULL,
	`task_id` text NOT NULL,
	`endpoint` text NOT NULL,
	`model` text NOT NULL,
	`stream` integer NOT NULL,
	`weight_version` integer,
	`admitted_at` integer NOT NULL,
	`started_at` integer NOT NULL,
	`first_byte_at` integer,
	`done_at` integer NOT NULL,
	`status` integer NOT NULL,
	`error` text,
	`finish_reason` text,
	`prompt_tokens` integer,
	`completion_tokens` integer,
	`truncated` integer NOT NULL,
	`body_key` text NOT NULL,
	`body_offset` integer NOT NULL,
	`body_length` integer NOT NULL,
	PRIMARY KEY(`engine`, `call_id`)
);
--> statement-breakpoint
CREATE INDEX `llm_calls_claim_idx` ON `llm_calls` (`engine`,`episode_uuid`,`fence`,`admitted_at`);--> statement-breakpoint
CREATE INDEX `llm_calls_time_idx` ON `llm_calls` (`engine`,`admitted_at`);--> statement-breakpoint
ALTER TABLE `trajectories` ADD `outcome` text;--> statement-breakpoint
CREATE INDEX `trajectories_ended_idx` ON `trajectories` (`engine`,`ended_at`,`id`);