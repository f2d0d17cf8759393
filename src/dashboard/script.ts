/**
 * Turns browser code written as TypeScript functions into the text of a <script>.
 *
 * Why this way: the page must work offline with no front-end build step, yet its code should
 * be type-checked like the rest of the repo. So the browser code lives in src/dashboard/client/
 * as *factories*: self-contained functions that reference nothing from their module scope
 * (dependencies come in as parameters, types may be imported freely). The Worker's bundler
 * compiles them to JavaScript with the rest of the Worker, and `Function.prototype.toString`
 * gives back that JavaScript, which is served as is.
 */

/** A self-contained factory: its source must run in a browser with only its parameters in scope. */
export type Factory = (...deps: never[]) => unknown;

/** One line of the script: `const <name> = (<factory source>)(<deps>);`. */
export type ScriptPart = { name: string; factory: Factory; deps?: readonly string[] };

const PRELUDE = [
  '"use strict";',
  // wrangler bundles with esbuild's keepNames, which wraps named functions in `__name(fn, "fn")`;
  // the helper lives at the top of the Worker bundle, so the browser needs its own (identity) one.
  "var __name = function (fn) { return fn; };",
];

export function composeScript(parts: readonly ScriptPart[], entry: string): string {
  const lines = parts.map((p) => `const ${p.name} = (${p.factory.toString()})(${(p.deps ?? []).join(", ")});`);
  // Wrapped in a block so nothing leaks into the page's global scope.
  return [...PRELUDE, "{", ...lines, entry, "}", ""].join("\n");
}
