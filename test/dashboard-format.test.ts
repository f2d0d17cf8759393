/** The dashboard's numbers and spans (src/dashboard/client/format.ts) at their unit boundaries. */
import { describe, expect, it } from "vitest";
import { formatModule } from "../src/dashboard/client/format";

const fmt = formatModule();

describe("the dashboard's formats", () => {
  it("rounds a span whole before splitting it: never 60 s in a minute or 60 min in an hour", () => {
    expect([9.94, 9.96, 59.4, 59.6, 119.6, 3599.4, 3599.7, 86_399.6].map(fmt.duration)).toEqual(["9.9 s", "10 s", "59 s", "1 min 0 s", "2 min 0 s", "59 min 59 s", "1 h 0 min", "1 d 0 h"]);
    expect([7_384, 90_061].map(fmt.duration)).toEqual(["2 h 3 min", "1 d 1 h"]);
    // The episode timeline's latencies go through it too.
    expect(fmt.ms(119_600)).toBe("2 min 0 s");
  });

  it("moves a count up a unit when rounding reaches a thousand of the smaller", () => {
    expect([9_999, 12_345, 999_499, 999_950, 4_500_000].map(fmt.count)).toEqual(["9999", "12.3k", "999k", "1M", "4.5M"]);
  });
});
