/** `--name value` and `--name=value` flags; `--flag` alone is "true". */
export function parseFlags(argv: string[]): Map<string, string> {
  const flags = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (!a.startsWith("--")) throw new Error(`unexpected argument ${a}`);
    const eq = a.indexOf("=");
    if (eq > 0) flags.set(a.slice(2, eq), a.slice(eq + 1));
    else if (i + 1 < argv.length && !argv[i + 1]!.startsWith("--")) flags.set(a.slice(2), argv[++i]!);
    else flags.set(a.slice(2), "true");
  }
  return flags;
}
