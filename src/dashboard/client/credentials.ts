/**
 * The tokens the dashboard remembers, in localStorage: one per engine, plus the deployment's
 * admin token if one was given (it can read every engine and list them all). Tokens stay in
 * this browser; the page sends them only to its own origin.
 */
import type { DomStorage } from "./dom";

export type Saved = { tokens: Record<string, string>; admin: string | null };

export function credentialsModule(storage: DomStorage) {
  const KEY = "rollout-exchange.dashboard.v1";
  // Without a prototype: an engine named `constructor` (a valid name) has no token of its own.
  // (Inside the factory: the page's script is made of the factories' own text, script.ts.)
  const noTokens = (): Record<string, string> => Object.create(null) as Record<string, string>;

  function load(): Saved {
    try {
      const raw: unknown = JSON.parse(storage.getItem(KEY) ?? "null");
      if (typeof raw !== "object" || raw === null) return { tokens: noTokens(), admin: null };
      const r = raw as { tokens?: unknown; admin?: unknown };
      const tokens = noTokens();
      if (typeof r.tokens === "object" && r.tokens !== null) {
        for (const [k, v] of Object.entries(r.tokens)) if (typeof v === "string") tokens[k] = v;
      }
      return { tokens, admin: typeof r.admin === "string" ? r.admin : null };
    } catch {
      // A corrupt entry (edited by hand, another version) is dropped rather than breaking the page.
      return { tokens: noTokens(), admin: null };
    }
  }

  const save = (s: Saved) => storage.setItem(KEY, JSON.stringify(s));

  return {
    load,
    /** The token to use for an engine: its own, else the admin's. */
    tokenFor: (engine: string): string | null => {
      const s = load();
      return s.tokens[engine] ?? s.admin;
    },
    setEngineToken: (engine: string, token: string) => {
      const s = load();
      s.tokens[engine] = token;
      save(s);
    },
    setAdmin: (token: string) => save({ ...load(), admin: token }),
    /** Forgets the token used for this engine: its own if it has one, else the admin's. */
    forget: (engine: string) => {
      const s = load();
      if (s.tokens[engine] !== undefined) delete s.tokens[engine];
      else s.admin = null;
      save(s);
    },
  };
}
export type Credentials = ReturnType<typeof credentialsModule>;
