import { z } from "zod";

export const ROLES = ["operator", "trainer", "client", "viewer"] as const;
export const Role = z.enum(ROLES, {
  error: (issue) => `unknown role ${JSON.stringify(issue.input)}; expected one of ${ROLES.join(", ")}`,
});
export type Role = z.infer<typeof Role>;

export const EngineName = z
  .string()
  .regex(/^[a-z0-9][a-z0-9_-]{0,62}$/, "engine names are 1-63 characters of a-z, 0-9, _ and -, starting with a letter or digit");

export const CreateEngineRequest = z.object({ name: EngineName });

export const IssuedToken = z.object({ id: z.string(), role: Role, token: z.string() });
export type IssuedToken = z.infer<typeof IssuedToken>;

export const CreateEngineResponse = z.object({
  engine: z.string(),
  tokens: z.record(Role, z.string()),
  token_ids: z.record(Role, z.string()),
});
export type CreateEngineResponse = z.infer<typeof CreateEngineResponse>;

export const IssueTokenRequest = z.object({ role: Role, label: z.string().max(200).default("") });

export const TokenInfo = z.object({
  id: z.string(),
  role: Role,
  label: z.string(),
  created_at: z.number(),
  revoked_at: z.number().nullable(),
});
export type TokenInfo = z.infer<typeof TokenInfo>;
export const TokenListResponse = z.object({ tokens: z.array(TokenInfo) });

export const EngineInfo = z.object({ name: z.string(), created_at: z.number() });
export const EngineListResponse = z.object({ engines: z.array(EngineInfo) });

/** Every 4xx/5xx body the exchange produces. `detail` matches FastAPI's shape, which AgentJet logs. */
export const ErrorResponse = z.object({ error: z.string(), detail: z.string() });
export type ErrorResponse = z.infer<typeof ErrorResponse>;
