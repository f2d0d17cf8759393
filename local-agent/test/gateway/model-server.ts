/** The gateway tests' model server: the one the relay benchmarks use too (scripts/local/model-server.ts). */
export { SERVED_MODELS, completion, lastUserText, startModelServer, tokenIds, type ModelServer, type SeenRequest } from "../../../scripts/local/model-server";
