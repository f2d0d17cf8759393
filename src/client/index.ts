export { EngineClient, type ClaimedEpisode, type EngineClientOptions } from "./exchange-client";
export { AdminClient } from "./admin-client";
export { ExchangeError, UNREADABLE_ANSWER, type FetchLike } from "./http";
export { RunsClient, RunsRefusal, type RunsClientOptions } from "./runs-client";
export { EXPORT_INTERRUPTED, LedgerClient } from "./ledger-client";
export { wholeTrajectory } from "./ledger-delta";
