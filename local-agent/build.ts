/**
 * Builds the rollout-agent package's one JavaScript file, dist/cli.js (run by `npm pack`'s
 * prepack). The agent's sources, the protocol schemas and clients it imports from ../src and
 * zod are bundled in, so the package carries the same schemas the Worker validates with; the
 * package's own dependencies (zeromq's native addon, undici) stay outside and npm installs them.
 * The target is Node 20: GPU hosts run the Node their image has, not the project's pinned 22.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { build } from "esbuild";
import { AGENT_VERSION } from "./src/help";

const here = import.meta.dirname;
const pkg = JSON.parse(readFileSync(join(here, "package.json"), "utf8")) as { version: string; dependencies: Record<string, string> };

if (pkg.version !== AGENT_VERSION) {
  throw new Error(`local-agent/package.json says version ${pkg.version} but src/help.ts's AGENT_VERSION is ${AGENT_VERSION}: change both`);
}

await build({
  entryPoints: [join(here, "src", "cli.ts")],
  outfile: join(here, "dist", "cli.js"),
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  external: Object.keys(pkg.dependencies),
  banner: { js: "#!/usr/bin/env node" },
  // The Python helpers ship in the package's python/, one folder up from the bundle (see runs/scanner.ts).
  define: { BUNDLED_PYTHON_DIR: JSON.stringify("../python/") },
  logLevel: "warning",
});
