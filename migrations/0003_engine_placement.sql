ALTER TABLE `engines` ADD `location_hint` text;--> statement-breakpoint
ALTER TABLE `engines` ADD `jurisdiction` text;