/**
 * The trainer command template: split into words the way a POSIX shell would (quotes and
 * backslashes, nothing else), then placeholders filled per word. We spawn the words directly,
 * without a shell, so a path with spaces in {config} stays one argument and a missing program
 * is reported as such (a shell would turn it into exit code 127).
 */

export class TemplateError extends Error {}

/** Splits `ajet --conf "{config}" --name 'my run'` into words. */
export function splitCommand(text: string): string[] {
  const words: string[] = [];
  let word = "";
  let inWord = false;
  let quote: "'" | '"' | null = null;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i] as string;
    if (quote === "'") {
      if (ch === "'") quote = null;
      else word += ch;
    } else if (quote === '"') {
      if (ch === '"') quote = null;
      else if (ch === "\\" && i + 1 < text.length && '"\\$`'.includes(text[i + 1] as string)) word += text[++i];
      else word += ch;
    } else if (ch === "'" || ch === '"') {
      quote = ch;
      inWord = true;
    } else if (ch === "\\") {
      if (i + 1 >= text.length) throw new TemplateError("the command ends with a lone backslash");
      word += text[++i];
      inWord = true;
    } else if (/\s/.test(ch)) {
      if (inWord) words.push(word);
      word = "";
      inWord = false;
    } else {
      word += ch;
      inWord = true;
    }
  }
  if (quote !== null) throw new TemplateError(`the command has an unclosed ${quote} quote`);
  if (inWord) words.push(word);
  if (words.length === 0) throw new TemplateError("the command is empty");
  return words;
}

const PLACEHOLDER = /\{([a-z_]+)\}/g;

/** Fills `{name}` placeholders in every word; an unknown placeholder is an error, not a silent literal. */
export function expandCommand(words: readonly string[], values: Record<string, string>): string[] {
  return words.map((w) =>
    w.replace(PLACEHOLDER, (whole, name: string) => {
      const v = values[name];
      if (v === undefined) throw new TemplateError(`unknown placeholder ${whole}; known: ${Object.keys(values).map((k) => `{${k}}`).join(", ")}`);
      return v;
    }),
  );
}

export const TEMPLATE_PLACEHOLDERS = ["config", "facade_url", "facade_port", "engine"] as const;

/** Checks a template's placeholders up front, so a typo fails at startup rather than at the first start command. */
export function checkPlaceholders(words: readonly string[]): void {
  expandCommand(words, Object.fromEntries(TEMPLATE_PLACEHOLDERS.map((k) => [k, ""])));
}
