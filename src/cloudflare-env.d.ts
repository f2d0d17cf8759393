// Tells the Workers types (and `cloudflare:workers` / `cloudflare:test` in tests) what this
// project's env and main module are.
type ProjectEnv = import("./env").Env;
declare namespace Cloudflare {
  interface Env extends ProjectEnv {}
  interface GlobalProps {
    mainModule: typeof import("./index");
    durableNamespaces: "EngineObject";
  }
}
