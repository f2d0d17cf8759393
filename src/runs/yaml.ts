/**
 * A small YAML writer for JSON values: block mappings and lists, every string double-quoted.
 * A run's config is plain JSON data, so the subset is enough, and writing it ourselves keeps
 * a YAML library out of the Worker bundle. The output is read by PyYAML (YAML 1.1) in the
 * run's processes, which decides two details:
 *
 * - strings are always quoted (JSON's escaping is valid in YAML double quotes), so `yes`,
 *   `on`, `0x10` or `1e3` stay strings;
 * - floats always carry a dot before any exponent (`1.0e-07`), because YAML 1.1 reads `1e-07`
 *   as a string.
 */
import type { JsonValue } from "../protocol/runs";

/** Keys that need no quotes; YAML 1.1's booleans and nulls are quoted even when they look plain. */
const PLAIN_KEY = /^[A-Za-z_][A-Za-z0-9_.-]*$/;
const YAML11_WORDS = /^(y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF|null|Null|NULL)$/;

/**
 * Characters JSON leaves as they are that YAML 1.1 does not: DEL, the C1 controls and the
 * noncharacters U+FFFE and U+FFFF are not allowed in a document at all (PyYAML refuses the file),
 * and NEL, LS and PS are line breaks, which a double-quoted scalar folds into a space; a BOM
 * inside a document is refused too.
 */
const NOT_YAML_AS_IS = /[\u007f-\u009f\u2028\u2029\ufeff\ufffe\uffff]/g;
/** The longest key YAML 1.1 takes as an implicit key (`key: value`); a longer one is written explicit (`? key`, then `: value`). */
const IMPLICIT_KEY_MAX = 1024;

/** A double-quoted YAML scalar that PyYAML reads back as `s`. */
function quoted(s: string): string {
  return JSON.stringify(s).replace(NOT_YAML_AS_IS, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

function key(k: string): string {
  return PLAIN_KEY.test(k) && !YAML11_WORDS.test(k) ? k : quoted(k);
}

function scalar(v: JsonValue): string {
  if (v === null) return "null";
  if (typeof v === "boolean") return v ? "true" : "false";
  if (typeof v === "number") {
    if (Number.isInteger(v) && Math.abs(v) < 1e21) return String(v);
    const s = JSON.stringify(v);
    // 1e-7 -> 1.0e-7; 1e+21 -> 1.0e+21; 0.5 stays.
    return /^-?\d+e/.test(s) ? s.replace("e", ".0e") : s;
  }
  return typeof v === "string" ? quoted(v) : JSON.stringify(v);
}

const isObject = (v: JsonValue): v is { [k: string]: JsonValue } => typeof v === "object" && v !== null && !Array.isArray(v);
const isEmpty = (v: JsonValue): boolean => (Array.isArray(v) && v.length === 0) || (isObject(v) && Object.keys(v).length === 0);

function block(v: JsonValue, indent: string): string[] {
  if (isObject(v)) {
    return Object.entries(v).flatMap(([k, item]) => {
      const written = key(k);
      const nested = (isObject(item) || Array.isArray(item)) && !isEmpty(item);
      if (written.length > IMPLICIT_KEY_MAX) {
        return nested ? [`${indent}? ${written}`, `${indent}:`, ...block(item, `${indent}  `)] : [`${indent}? ${written}`, `${indent}: ${inline(item)}`];
      }
      return nested ? [`${indent}${written}:`, ...block(item, `${indent}  `)] : [`${indent}${written}: ${inline(item)}`];
    });
  }
  if (Array.isArray(v)) {
    return v.flatMap((item) => {
      if (isEmpty(item) || !(isObject(item) || Array.isArray(item))) return [`${indent}- ${inline(item)}`];
      // The first line of a nested block goes after the dash; the rest keeps the block's indent.
      const [first, ...rest] = block(item, `${indent}  `);
      return [`${indent}- ${(first as string).trimStart()}`, ...rest];
    });
  }
  return [`${indent}${scalar(v)}`];
}

function inline(v: JsonValue): string {
  if (Array.isArray(v)) return "[]";
  if (isObject(v)) return "{}";
  return scalar(v);
}

/** Renders a JSON value as a YAML document. */
export function toYaml(doc: JsonValue): string {
  if (isEmpty(doc) || !(isObject(doc) || Array.isArray(doc))) return `${inline(doc)}\n`;
  return `${block(doc, "").join("\n")}\n`;
}
