ALTER TABLE `buffer_groups` ADD `failed_sessions` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `buffer_groups` ADD `partial` integer DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE `buffer_groups` ADD `consumer_weight_version` integer;--> statement-breakpoint
ALTER TABLE `buffer_groups` ADD `lag_versions` integer;--> statement-breakpoint
ALTER TABLE `buffer_groups` ADD `queued_seconds` real;