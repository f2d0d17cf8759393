CREATE TABLE `inference_tests` (
	`id` text PRIMARY KEY NOT NULL,
	`engine` text NOT NULL,
	`environment` text NOT NULL,
	`status` text NOT NULL,
	`detail` text NOT NULL,
	`request` text NOT NULL,
	`models` text NOT NULL,
	`created_at` integer NOT NULL,
	`finished_at` integer
);
--> statement-breakpoint
CREATE INDEX `inference_tests_engine_idx` ON `inference_tests` (`engine`,`created_at`);--> statement-breakpoint
CREATE TABLE `run_catalogs` (
	`engine` text PRIMARY KEY NOT NULL,
	`agent_id` text NOT NULL,
	`directories` text NOT NULL,
	`problems` text NOT NULL,
	`scanned_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `run_config_edits` (
	`engine` text NOT NULL,
	`environment` text NOT NULL,
	`field` text NOT NULL,
	`value` text NOT NULL,
	`edited_at` integer NOT NULL,
	PRIMARY KEY(`engine`, `environment`, `field`)
);
--> statement-breakpoint
CREATE TABLE `run_environments` (
	`engine` text NOT NULL,
	`name` text NOT NULL,
	`class_name` text NOT NULL,
	`file_path` text NOT NULL,
	`description` text NOT NULL,
	`config_class` text NOT NULL,
	`fields` text,
	`fields_source` text,
	`fields_error` text,
	PRIMARY KEY(`engine`, `name`)
);
--> statement-breakpoint
CREATE TABLE `run_events` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`run_id` text NOT NULL,
	`at` integer NOT NULL,
	`kind` text NOT NULL,
	`detail` text NOT NULL
);
--> statement-breakpoint
CREATE INDEX `run_events_run_idx` ON `run_events` (`run_id`,`id`);--> statement-breakpoint
CREATE TABLE `run_locked_fields` (
	`engine` text NOT NULL,
	`section` text NOT NULL,
	`name` text NOT NULL,
	`value` text NOT NULL,
	`updated_at` integer NOT NULL,
	PRIMARY KEY(`engine`, `section`, `name`)
);
--> statement-breakpoint
CREATE TABLE `run_metrics` (
	`run_id` text NOT NULL,
	`idx` integer NOT NULL,
	`step` integer,
	`at` real NOT NULL,
	`metric_values` text NOT NULL,
	PRIMARY KEY(`run_id`, `idx`)
);
--> statement-breakpoint
CREATE TABLE `run_processes` (
	`run_id` text NOT NULL,
	`name` text NOT NULL,
	`ord` integer NOT NULL,
	`state` text NOT NULL,
	`pid` integer,
	`command` text NOT NULL,
	`log_path` text NOT NULL,
	`log_tail` text NOT NULL,
	`exit_code` integer,
	`signal` text,
	`started_at` integer,
	`ready_at` integer,
	`ended_at` integer,
	`detail` text NOT NULL,
	PRIMARY KEY(`run_id`, `name`)
);
--> statement-breakpoint
CREATE TABLE `run_selections` (
	`engine` text PRIMARY KEY NOT NULL,
	`environment` text NOT NULL,
	`selected_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `runs` (
	`id` text PRIMARY KEY NOT NULL,
	`engine` text NOT NULL,
	`environment` text NOT NULL,
	`environment_file` text NOT NULL,
	`status` text NOT NULL,
	`detail` text DEFAULT '' NOT NULL,
	`config_yaml` text NOT NULL,
	`edits` text NOT NULL,
	`command_seq` integer,
	`stop_requested_at` integer,
	`agent_id` text DEFAULT '' NOT NULL,
	`created_at` integer NOT NULL,
	`started_at` integer,
	`ended_at` integer,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `runs_engine_created_idx` ON `runs` (`engine`,`created_at`);--> statement-breakpoint
CREATE UNIQUE INDEX `runs_one_active_idx` ON `runs` (`engine`) WHERE status IN ('pending', 'starting', 'running', 'stopping');