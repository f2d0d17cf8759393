/** The runs feature's plain rules: Python annotations as type checks, the YAML writer, the status machine. */
import { describe, expect, it } from "vitest";
import { parsePyType, typeProblem } from "../src/runs/field-types";
import { toYaml } from "../src/runs/yaml";
import { applyReport, applyStop } from "../src/runs/lifecycle";
import type { JsonValue } from "../src/protocol/runs";

const ok = (type: string, value: JsonValue) => typeProblem(parsePyType(type), value);

describe("Python annotations", () => {
  it("accepts values of the annotated type and refuses others", () => {
    const cases: Array<[string, JsonValue, boolean]> = [
      ["int", 3, true],
      ["int", 3.5, false],
      ["int", true, false],
      ["float", 3, true],
      ["float", "3", false],
      ["str", "x", true],
      ["bool", false, true],
      ["bool", 0, false],
      ["Optional[int]", null, true],
      ["typing.Optional[int]", 4, true],
      ["int | None", null, true],
      ["int | None", "4", false],
      ["Union[int, str]", "a", true],
      ["Union[int, str]", [], false],
      ["List[int]", [1, 2], true],
      ["list[int]", [1, "2"], false],
      ["Dict[str, float]", { a: 1.5 }, true],
      ["dict[str, float]", { a: "x" }, false],
      ["Tuple[int, str]", [1, "a"], true],
      ["Tuple[int, str]", [1, 2], false],
      ["Tuple[int, ...]", [1, 2, 3], true],
      ["Literal['a', \"b\", 3, True, None]", "b", true],
      ["Literal['a', \"b\", 3, True, None]", null, true],
      ["Literal['a', \"b\", 3, True, None]", "c", false],
      ["<class 'int'>", 2, true],
      ["<class 'int'>", "2", false],
      ["Annotated[int, Field(gt=0)]", 1, true],
      ["pydantic.HttpUrl", 5, true],
      ["Callable[[int], str]", "anything", true],
      ["this is [not python", { any: "thing" }, true],
    ];
    for (const [type, value, fits] of cases) expect(ok(type, value) === null, `${type} <- ${JSON.stringify(value)}`).toBe(fits);
  });

  it("says which item or key is wrong", () => {
    expect(ok("List[List[int]]", [[1], [2, "x"]])).toBe('item 1: item 1: expected an integer, got the string "x"');
    expect(ok("Dict[str, int]", { a: 1, b: null })).toBe('key "b": expected an integer, got null');
    expect(ok("Optional[List[str]]", ["a", 1])).toBe("item 1: expected a string, got the integer 1");
    expect(ok("Union[int, str]", [])).toBe("expected an integer or a string, got a list");
  });
});

describe("YAML writer", () => {
  it("writes nested mappings and lists, quoting every string and keeping floats floats in YAML 1.1", () => {
    expect(
      toYaml({
        env: { group_size: 16, lr: 4e-5, tiny: 1e-7, big: 1e21, name: "yes", empty: {}, none: null, flags: [] },
        openai: [{ base_url: "http://x/v1", weight: 1.5 }],
        "odd key": [[1, 2], { a: "b\nc" }],
        on: true,
      }),
    ).toBe(
      [
        "env:",
        "  group_size: 16",
        "  lr: 0.00004",
        "  tiny: 1.0e-7",
        "  big: 1.0e+21",
        '  name: "yes"',
        "  empty: {}",
        "  none: null",
        "  flags: []",
        "openai:",
        '  - base_url: "http://x/v1"',
        "    weight: 1.5",
        '"odd key":',
        "  - - 1",
        "    - 2",
        '  - a: "b\\nc"',
        '"on": true',
        "",
      ].join("\n"),
    );
    expect(toYaml({})).toBe("{}\n");
    expect(toYaml("x")).toBe('"x"\n');
  });

  it("escapes what YAML 1.1 refuses or folds (DEL, C1 controls, NEL, LS, PS, BOM, U+FFFE, U+FFFF), in keys and values", () => {
    expect(toYaml({ "k\u0085": "a\u007fb\u0090\u2028\u2029\ufeffc" })).toBe('"k\\u0085": "a\\u007fb\\u0090\\u2028\\u2029\\ufeffc"\n');
    // PyYAML refuses the noncharacters in a document ("special characters are not allowed").
    expect(toYaml({ "k\uffff": "a\ufffeb" })).toBe('"k\\uffff": "a\\ufffeb"\n');
  });

  it("writes a key longer than YAML 1.1's implicit keys (1,024 characters) as an explicit key", () => {
    // Written `key: value`, PyYAML refused the file ("mapping values are not allowed here"): a
    // Dict[str, int] edit with such a key was taken, and the run's trainer could not load its config.
    // The output below is read back by PyYAML 6 as the value given.
    const long = "k".repeat(1100);
    const odd = `"${"x".repeat(1030)}`;
    expect(toYaml({ m: { [long]: 1, nest: { [long]: [1] } }, l: [{ [odd]: {} }] })).toBe(
      ["m:", `  ? ${long}`, "  : 1", "  nest:", `    ? ${long}`, "    :", "      - 1", "l:", `  - ? ${JSON.stringify(odd)}`, "    : {}", ""].join("\n"),
    );
    expect(toYaml({ ["k".repeat(1024)]: 1 })).toBe(`${"k".repeat(1024)}: 1\n`);
  });
});

describe("run status machine", () => {
  it("follows the agent until the run is over, then holds", () => {
    expect(applyReport("pending", "starting")).toEqual({ next: "starting", mustStop: false, changed: true });
    expect(applyReport("starting", "running")).toEqual({ next: "running", mustStop: false, changed: true });
    expect(applyReport("running", "starting")).toEqual({ next: "running", mustStop: false, changed: false });
    expect(applyReport("running", "failed")).toEqual({ next: "failed", mustStop: false, changed: true });
    expect(applyReport("stopping", "running")).toEqual({ next: "stopping", mustStop: true, changed: false });
    expect(applyReport("stopping", "stopped")).toEqual({ next: "stopped", mustStop: false, changed: true });
    expect(applyReport("stopped", "running")).toEqual({ next: "stopped", mustStop: true, changed: false });
    expect(applyReport("completed", "completed")).toEqual({ next: "completed", mustStop: false, changed: false });
  });

  it("stops pending runs at once, running ones through the agent, and forced ones at once", () => {
    expect(applyStop("pending", false)).toMatchObject({ next: "stopped", changed: true, queueStop: true });
    expect(applyStop("running", false)).toMatchObject({ next: "stopping", changed: true, queueStop: true });
    expect(applyStop("stopping", false)).toMatchObject({ next: "stopping", changed: false, queueStop: false });
    expect(applyStop("stopping", true)).toMatchObject({ next: "stopped", changed: true, queueStop: true });
    expect(applyStop("failed", true)).toMatchObject({ next: "failed", changed: false, queueStop: false });
  });
});
