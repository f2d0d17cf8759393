/** A real local HTTP server for tests: the one the benchmarks use too (scripts/local/http-server.ts). */
export { bodyText, serveHttp, type LocalServer as TestServer } from "../../../scripts/local/http-server";
