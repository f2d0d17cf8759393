/**
 * Type checks for config edits. An environment's config fields arrive with their Python
 * annotation as text (`int`, `Optional[str]`, `List[int]`, `Literal['a', 'b']`, `int | None`),
 * read by the agent from the module or its source. This parses that text into a small type
 * tree and checks a JSON value against it, so a wrong type is refused here, with a message,
 * instead of failing hours later inside the trainer.
 *
 * Types we cannot check (a custom class, pydantic's own types) accept any value: refusing
 * every edit of such a field would be worse than letting the environment validate it.
 */
import type { JsonValue } from "../protocol/runs";

export type PyType =
  | { kind: "int" | "float" | "str" | "bool" | "none" | "any" }
  | { kind: "list"; item: PyType }
  | { kind: "tuple"; items: PyType[] | null }
  | { kind: "dict"; value: PyType }
  | { kind: "union"; options: PyType[] }
  | { kind: "literal"; values: JsonValue[] };

const SCALARS: Record<string, PyType> = {
  int: { kind: "int" },
  float: { kind: "float" },
  str: { kind: "str" },
  bool: { kind: "bool" },
  None: { kind: "none" },
  NoneType: { kind: "none" },
  Any: { kind: "any" },
  object: { kind: "any" },
};
/** `...` in `Tuple[int, ...]`; recognised by identity. */
const ELLIPSIS: PyType = { kind: "any" };
const LISTS = new Set(["List", "list", "Sequence", "Set", "set", "FrozenSet", "frozenset", "Iterable"]);
const DICTS = new Set(["Dict", "dict", "Mapping", "MutableMapping"]);

class Parser {
  private i = 0;
  constructor(private readonly s: string) {}

  parse(): PyType {
    const t = this.union();
    this.space();
    if (this.i < this.s.length) throw new Error(`unexpected ${JSON.stringify(this.s.slice(this.i))}`);
    return t;
  }

  private space(): void {
    while (this.s[this.i] === " ") this.i++;
  }

  private union(): PyType {
    const options = [this.atom()];
    for (;;) {
      this.space();
      if (this.s[this.i] !== "|") break;
      this.i++;
      options.push(this.atom());
    }
    return options.length === 1 ? (options[0] as PyType) : { kind: "union", options };
  }

  private name(): string {
    this.space();
    const m = /^[A-Za-z_][A-Za-z0-9_.]*/.exec(this.s.slice(this.i));
    if (!m) throw new Error(`expected a type at ${JSON.stringify(this.s.slice(this.i))}`);
    this.i += m[0].length;
    // typing.Optional, pydantic.types.X: only the last part names the type.
    return m[0].slice(m[0].lastIndexOf(".") + 1);
  }

  private args(read: () => PyType | JsonValue): Array<PyType | JsonValue> {
    this.space();
    if (this.s[this.i] !== "[") return [];
    this.i++;
    const out: Array<PyType | JsonValue> = [];
    for (;;) {
      this.space();
      if (this.s[this.i] === "]") break;
      out.push(read());
      this.space();
      if (this.s[this.i] === ",") this.i++;
      else if (this.s[this.i] !== "]") throw new Error(`expected , or ] at ${JSON.stringify(this.s.slice(this.i))}`);
    }
    this.i++;
    return out;
  }

  private atom(): PyType {
    this.space();
    if (this.s.startsWith("...", this.i)) {
      this.i += 3;
      return ELLIPSIS;
    }
    if (this.s[this.i] === "[") {
      // The argument list of Callable[[...], ...]: not a value type we check.
      this.args(() => this.union());
      return { kind: "any" };
    }
    const name = this.name();
    if (name === "Literal") return { kind: "literal", values: this.args(() => this.literal()) as JsonValue[] };
    const args = this.args(() => this.union()) as PyType[];
    if (name === "Optional") return { kind: "union", options: [args[0] ?? { kind: "any" }, { kind: "none" }] };
    if (name === "Union") return { kind: "union", options: args };
    if (name === "Annotated") return args[0] ?? { kind: "any" };
    if (LISTS.has(name)) return { kind: "list", item: args[0] ?? { kind: "any" } };
    if (name === "Tuple" || name === "tuple") {
      // Tuple[int, ...] is a list of ints; Tuple[int, str] has a fixed shape.
      return args.length === 2 && args[1] === ELLIPSIS ? { kind: "list", item: args[0] as PyType } : { kind: "tuple", items: args.length ? args : null };
    }
    if (DICTS.has(name)) return { kind: "dict", value: args[1] ?? { kind: "any" } };
    return SCALARS[name] ?? { kind: "any" };
  }

  private literal(): JsonValue {
    this.space();
    const rest = this.s.slice(this.i);
    const str = /^'((?:[^'\\]|\\.)*)'|^"((?:[^"\\]|\\.)*)"/.exec(rest);
    if (str) {
      this.i += str[0].length;
      return (str[1] ?? str[2] ?? "").replace(/\\(.)/g, "$1");
    }
    const num = /^-?\d+(\.\d+)?([eE][-+]?\d+)?/.exec(rest);
    if (num) {
      this.i += num[0].length;
      return Number(num[0]);
    }
    const word = /^(True|False|None|\.\.\.)/.exec(rest);
    if (word) {
      this.i += word[0].length;
      return word[0] === "True" ? true : word[0] === "False" ? false : null;
    }
    throw new Error(`unsupported literal at ${JSON.stringify(rest)}`);
  }
}

/** Parses an annotation; text we cannot read is treated as "any" rather than refusing every edit. */
export function parsePyType(text: string): PyType {
  // `<class 'int'>` is how Python prints a bare class.
  const cls = /^<class '([^']+)'>$/.exec(text.trim());
  try {
    return new Parser(cls ? (cls[1] as string) : text.trim()).parse();
  } catch {
    return { kind: "any" };
  }
}

/** Describes why `value` is not of `type`, or returns null when it is. */
export function typeProblem(type: PyType, value: JsonValue): string | null {
  switch (type.kind) {
    case "any":
      return null;
    case "int":
      return typeof value === "number" && Number.isInteger(value) ? null : `expected an integer, got ${describe(value)}`;
    case "float":
      return typeof value === "number" ? null : `expected a number, got ${describe(value)}`;
    case "str":
      return typeof value === "string" ? null : `expected a string, got ${describe(value)}`;
    case "bool":
      return typeof value === "boolean" ? null : `expected true or false, got ${describe(value)}`;
    case "none":
      return value === null ? null : `expected null, got ${describe(value)}`;
    case "literal":
      return type.values.some((v) => v === value) ? null : `expected one of ${type.values.map((v) => JSON.stringify(v)).join(", ")}, got ${describe(value)}`;
    case "list": {
      if (!Array.isArray(value)) return `expected a list, got ${describe(value)}`;
      for (const [i, v] of value.entries()) {
        const p = typeProblem(type.item, v);
        if (p !== null) return `item ${i}: ${p}`;
      }
      return null;
    }
    case "tuple": {
      if (!Array.isArray(value)) return `expected a list, got ${describe(value)}`;
      if (type.items === null) return null;
      if (value.length !== type.items.length) return `expected ${type.items.length} items, got ${value.length}`;
      for (const [i, t] of type.items.entries()) {
        const p = typeProblem(t, value[i] as JsonValue);
        if (p !== null) return `item ${i}: ${p}`;
      }
      return null;
    }
    case "dict": {
      if (typeof value !== "object" || value === null || Array.isArray(value)) return `expected an object, got ${describe(value)}`;
      for (const [k, v] of Object.entries(value)) {
        const p = typeProblem(type.value, v as JsonValue);
        if (p !== null) return `key ${JSON.stringify(k)}: ${p}`;
      }
      return null;
    }
    case "union": {
      const problems = type.options.map((o) => typeProblem(o, value));
      if (problems.some((p) => p === null)) return null;
      // A list for Optional[List[str]] with one bad item: say which item, not just "expected a list".
      const sameShape = type.options.flatMap((o, i) => (shapeOf(o) === jsonShape(value) ? [problems[i] as string] : []));
      return sameShape.length === 1 ? (sameShape[0] as string) : `expected ${type.options.map(typeName).join(" or ")}, got ${describe(value)}`;
    }
  }
}

function shapeOf(t: PyType): string {
  if (t.kind === "list" || t.kind === "tuple") return "array";
  if (t.kind === "dict") return "object";
  if (t.kind === "int" || t.kind === "float") return "number";
  return t.kind;
}

function jsonShape(v: JsonValue): string {
  if (v === null) return "none";
  if (Array.isArray(v)) return "array";
  if (typeof v === "object") return "object";
  return typeof v === "string" ? "str" : typeof v === "boolean" ? "bool" : "number";
}

function typeName(t: PyType): string {
  switch (t.kind) {
    case "list":
    case "tuple":
      return "a list";
    case "dict":
      return "an object";
    case "literal":
      return t.values.map((v) => JSON.stringify(v)).join(" or ");
    case "union":
      return t.options.map(typeName).join(" or ");
    case "int":
      return "an integer";
    case "float":
      return "a number";
    case "str":
      return "a string";
    case "bool":
      return "true or false";
    case "none":
      return "null";
    case "any":
      return "any value";
  }
}

function describe(v: JsonValue): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "a list";
  if (typeof v === "object") return "an object";
  if (typeof v === "number") return Number.isInteger(v) ? `the integer ${v}` : `the number ${v}`;
  if (typeof v === "string") return `the string ${JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}...` : v)}`;
  return `${typeof v} ${JSON.stringify(v)}`;
}
