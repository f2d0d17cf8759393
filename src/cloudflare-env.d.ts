// Tells the Workers types (and `cloudflare:workers` / `cloudflare:test` in tests) what this
// project's env and main module are.
declare namespace Cloudflare {
  interface Env extends import("./env").Env {}
  interface GlobalProps {
    mainModule: typeof import("./index");
    durableNamespaces: "EngineObject";
  }
}
