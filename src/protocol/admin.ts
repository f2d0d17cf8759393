import { z } from "zod";
import { openEnum } from "./open-enum";

export const ROLES = ["operator", "trainer", "client", "viewer"] as const;
export const Role = z.enum(ROLES, {
  error: (issue) => `unknown role ${JSON.stringify(issue.input)}; expected one of ${ROLES.join(", ")}`,
});
export type Role = z.infer<typeof Role>;

/** What an engine's name may be: it goes into URLs, keys and Durable Object names as it is. */
export const ENGINE_NAME_PATTERN = /^[a-z0-9][a-z0-9_-]{0,62}$/;
export const EngineName = z
  .string()
  .regex(ENGINE_NAME_PATTERN, "engine names are 1-63 characters of a-z, 0-9, _ and -, starting with a letter or digit");

/**
 * Where an engine's Durable Object should live: Cloudflare's documented location hints (best
 * effort, honoured when the object is first created) and jurisdictions (a guarantee: the object
 * runs and stores data only inside it). developers.cloudflare.com/durable-objects/reference/data-location
 */
export const LOCATION_HINTS = ["wnam", "enam", "sam", "weur", "eeur", "apac", "oc", "afr", "me"] as const;
export const LocationHint = z.enum(LOCATION_HINTS, {
  error: (issue) => `unknown location hint ${JSON.stringify(issue.input)}; expected one of ${LOCATION_HINTS.join(", ")}`,
});
export type LocationHint = z.infer<typeof LocationHint>;
export const JURISDICTIONS = ["eu", "fedramp", "us"] as const;
export const Jurisdiction = z.enum(JURISDICTIONS, {
  error: (issue) => `unknown jurisdiction ${JSON.stringify(issue.input)}; expected one of ${JURISDICTIONS.join(", ")}`,
});
export type Jurisdiction = z.infer<typeof Jurisdiction>;

/**
 * Strict, as every body that sets something: a misspelt field (`jurisdicton`) dropped silently
 * would make an engine outside the jurisdiction asked for, which only a delete can undo, or a
 * token without the label asked for, whose secret is shown once.
 */
export const CreateEngineRequest = z.strictObject({
  name: EngineName,
  location_hint: LocationHint.nullish().transform((v) => v ?? null),
  jurisdiction: Jurisdiction.nullish().transform((v) => v ?? null),
});

export const IssuedToken = z.object({ id: z.string(), role: Role, token: z.string() });
export type IssuedToken = z.infer<typeof IssuedToken>;

/**
 * Answers read placement and roles as open enums (open-enum.ts): a pinned SDK reads the list of
 * a newer exchange whose engines are placed by a hint it added, or whose tokens have a new role.
 */
const AnsweredHint = openEnum(LOCATION_HINTS).nullable();
const AnsweredJurisdiction = openEnum(JURISDICTIONS).nullable();

export const CreateEngineResponse = z.object({
  engine: z.string(),
  location_hint: AnsweredHint,
  jurisdiction: AnsweredJurisdiction,
  tokens: z.looseRecord(Role, z.string()),
  token_ids: z.looseRecord(Role, z.string()),
});
export type CreateEngineResponse = z.infer<typeof CreateEngineResponse>;

export const IssueTokenRequest = z.strictObject({ role: Role, label: z.string().max(200).default("") });

export const TokenInfo = z.object({
  id: z.string(),
  role: openEnum(ROLES),
  label: z.string(),
  created_at: z.number(),
  revoked_at: z.number().nullable(),
});
export type TokenInfo = z.infer<typeof TokenInfo>;
export const TokenListResponse = z.object({ tokens: z.array(TokenInfo) });

export const EngineInfo = z.object({
  name: z.string(),
  created_at: z.number(),
  location_hint: AnsweredHint,
  jurisdiction: AnsweredJurisdiction,
  /** When a delete began that has not finished (its engine answers 404 meanwhile); repeat the DELETE to finish it. */
  deleting_since: z.number().nullable(),
});
export const EngineListResponse = z.object({ engines: z.array(EngineInfo) });

const QueryFlag = z.enum(["true", "false"], { error: 'expected "true" or "false"' }).transform((v) => v === "true");

export const DeleteEngineQuery = z.object({
  force: QueryFlag.default(false).describe("Delete even while the engine's agent is connected (its heartbeat is recent)."),
  keep_history: QueryFlag.default(false).describe(
    "Keep the engine's trajectories, reward history, training runs and inference tests in D1, filed under `<name>@<ms since the epoch when the delete began>`.",
  ),
});
export type DeleteEngineQuery = z.infer<typeof DeleteEngineQuery>;

/** 200 once everything is gone; 202 (`done: false`) when the request ran out of its share of work: repeat it. */
export const DeleteEngineResponse = z.object({
  engine: z.string(),
  done: z.boolean(),
  /** Where the kept history is filed, or null when it was deleted. */
  history_kept_as: z.string().nullable(),
  /** D1 rows this request deleted (or, for kept history, re-filed), by table. */
  rows: z.record(z.string(), z.number()),
});
export type DeleteEngineResponse = z.infer<typeof DeleteEngineResponse>;

/**
 * Where a keep_history delete filed an engine's history: `<engine>@<ms since the epoch when the
 * delete began>` (DeleteEngineResponse.history_kept_as). "@" is in no engine's name.
 */
export const ArchiveName = z
  .string()
  .regex(
    new RegExp(`^${ENGINE_NAME_PATTERN.source.slice(1, -1)}@\\d{1,16}$`),
    "archive names are <engine>@<ms>, as a keep_history delete answers them (history_kept_as)",
  );

export const ArchiveInfo = z.object({
  name: z.string(),
  /** The engine whose history it is (another engine may have that name since). */
  engine: z.string(),
  /** When the delete that kept it began, seconds since the epoch. */
  created_at: z.number(),
});
export type ArchiveInfo = z.infer<typeof ArchiveInfo>;

/** At most this many archives per page of the list. */
export const MAX_ARCHIVES_PAGE = 1000;

export const ArchiveListQuery = z.object({
  after: ArchiveName.optional().describe("The `next` of the page before: the list goes on after this name."),
  limit: z.coerce.number().int().min(1).max(MAX_ARCHIVES_PAGE).default(100).describe(`Archives per page, 1 to ${MAX_ARCHIVES_PAGE}.`),
});
export type ArchiveListQuery = z.infer<typeof ArchiveListQuery>;

/** A page of archives in name order (an engine's together, oldest first); `next` is null on the last. */
export const ArchiveListResponse = z.object({ archives: z.array(ArchiveInfo), next: ArchiveName.nullable() });
export type ArchiveListResponse = z.infer<typeof ArchiveListResponse>;

/** 200 once the archive is gone; 202 (`done: false`) when the request ran out of its share of work: repeat it. */
export const DeleteArchiveResponse = z.object({
  archive: z.string(),
  done: z.boolean(),
  /** D1 rows this request deleted, by table. */
  rows: z.record(z.string(), z.number()),
});
export type DeleteArchiveResponse = z.infer<typeof DeleteArchiveResponse>;

/** Every 4xx/5xx body the exchange produces. `detail` matches FastAPI's shape, which AgentJet logs. */
export const ErrorResponse = z.object({ error: z.string(), detail: z.string() });
export type ErrorResponse = z.infer<typeof ErrorResponse>;
