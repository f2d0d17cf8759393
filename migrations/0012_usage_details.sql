ALTER TABLE `llm_calls` ADD `cached_tokens` integer;--> statement-breakpoint
ALTER TABLE `llm_calls` ADD `reasoning_tokens` integer;