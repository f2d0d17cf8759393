/**
 * The trainer command template: split into words the way a POSIX shell would (quotes and
 * backslashes, nothing else), then placeholders filled per word. We spawn the words directly,
 * without a shell, so a path with spaces in {config} stays one argument and a missing program
 * is reported as such (a shell would turn it into exit code 127).
 *
 * A template may run a shell itself (`sh -c '...'`, for pipes and variables), or other code of
 * its words (`python -c`): a value filled into it is read as syntax. Values that come from the
 * exchange (a start_rollout's job_session, whoever holds the trainer token sends it) are then
 * held to characters no shell reads as syntax, in any quoting: else a job session `x; rm -rf ~`
 * would run on the host.
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
      else if (ch === "\\" && text[i + 1] === "\n") i++; // a line continuation: both go
      else if (ch === "\\" && i + 1 < text.length && '"\\$`'.includes(text[i + 1] as string)) word += text[++i];
      else word += ch;
    } else if (ch === "'" || ch === '"') {
      quote = ch;
      inWord = true;
    } else if (ch === "\\") {
      if (i + 1 >= text.length) throw new TemplateError("the command ends with a lone backslash");
      // A line continuation (a command written over several lines) goes, and starts no word.
      if (text[i + 1] === "\n") i++;
      else {
        word += text[++i];
        inWord = true;
      }
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

/** What a value from the exchange may hold when a shell reads it: no quote, space, `$`, backquote, `;`, `|`, `&`, redirection, glob or escape. */
const SHELL_SAFE = /^[A-Za-z0-9._:@+=,/%-]*$/;

/**
 * An option that may make a program run its argument as code: a shell's `-c` (`-lc`, `-ec`),
 * which wrappers pass on to one (`flock -c`, `script -c`, `su -c`); Python's `-c`, also with the
 * code in the same word (`-c'...'`); `-e` and `-E` of node, perl and ruby, bundled too (perl's
 * `-le`, `-ne`); node's `-p`; `--eval`, `--command`, `--print`, `--exec(ute)`, also with `=`. A
 * short option bundle counts once any of those letters is in it.
 */
const CODE_OPTION = /^(-[A-Za-z]*[ceEp]|--(eval|command|print|exec|execute)(=|$))/;

/**
 * Whether the command may run code of its own words (`sh -c '...'`, directly or through any
 * wrapper). Which programs read which options as code cannot be known, so any such option counts:
 * a value held to SHELL_SAFE where none was needed fails loudly, naming the variable to read
 * instead; one let through where a program ran it as code runs the sender's commands on the host.
 * A program given a script file (`sh launch.sh {job_session}`) gets the values as arguments.
 */
function runsCode(words: readonly string[]): boolean {
  return words.slice(1).some((w) => CODE_OPTION.test(w));
}

/**
 * Fills `{name}` placeholders in every word; an unknown placeholder is an error, not a silent
 * literal. `fromExchange` names the values the exchange sent, with the environment variable each
 * is also in: in a command that runs a shell, such a value must be SHELL_SAFE.
 */
export function expandCommand(words: readonly string[], values: Record<string, string>, fromExchange: Readonly<Record<string, string>> = {}): string[] {
  const shell = Object.keys(fromExchange).length > 0 && runsCode(words);
  return words.map((w) =>
    w.replace(PLACEHOLDER, (whole, name: string) => {
      const v = values[name];
      if (v === undefined) throw new TemplateError(`unknown placeholder ${whole}; known: ${Object.keys(values).map((k) => `{${k}}`).join(", ")}`);
      const variable = fromExchange[name];
      if (shell && variable !== undefined && !SHELL_SAFE.test(v)) {
        throw new TemplateError(
          `${whole} is ${JSON.stringify(v.slice(0, 100))}, sent by the exchange, and the command may run it as code (an option such as -c or -e), which would read characters of it as its own syntax: not run. ` +
            `In a script, read it from the environment instead ("$${variable}"), or pass it as an argument of a program the agent starts without a shell.`,
        );
      }
      return v;
    }),
  );
}

export const TEMPLATE_PLACEHOLDERS = ["config", "facade_url", "facade_port", "engine"] as const;

/** Checks a template's placeholders up front, so a typo fails at startup rather than at the first start command. */
export function checkPlaceholders(words: readonly string[]): void {
  expandCommand(words, Object.fromEntries(TEMPLATE_PLACEHOLDERS.map((k) => [k, ""])));
}
