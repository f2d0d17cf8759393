/**
 * The engine's trajectory-ledger settings (protocol/ledger.ts): what its gateway records of each
 * relayed call, and how long the records are kept. Read by every admission, so kept in memory.
 */
import { DEFAULT_RETENTION_DAYS, type LedgerConfig, type UpdateLedgerConfigRequest } from "../protocol/ledger";
import type { EngineStore } from "./engine-store";

const KEY = "ledger_config";
export const DEFAULT_LEDGER_CONFIG: LedgerConfig = { capture: "messages", retention_days: DEFAULT_RETENTION_DAYS };

export class LedgerSettings {
  private cached: LedgerConfig | null = null;

  constructor(private readonly store: EngineStore) {}

  get(): LedgerConfig {
    return (this.cached ??= { ...DEFAULT_LEDGER_CONFIG, ...(this.store.getKv<Partial<LedgerConfig>>(KEY) ?? {}) });
  }

  /** Writes the change; call inside the transaction that keeps it. */
  configure(patch: UpdateLedgerConfigRequest): LedgerConfig {
    const next: LedgerConfig = { ...this.get(), ...patch };
    this.store.setKv(KEY, next);
    return next;
  }

  /** After a transaction: what configure wrote is what admissions read from now on (null: reread it). */
  committed(next: LedgerConfig | null): void {
    this.cached = next;
  }
}
