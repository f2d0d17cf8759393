export * from "./status";
export * from "./swarm";
export * from "./commands";
export * from "./admin";
export * from "./agent";
export * from "./buffer";
export * from "./relay";
export * from "./runs";
