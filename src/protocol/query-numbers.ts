/**
 * Numbers read from a query string. z.coerce.number reads a blank value (`?wait=`, `?wait=%20`)
 * as 0, which a range starting at 0 takes: as NaN it names no number and is refused, like `abc`.
 */
import { z } from "zod";

const blankAsNaN = (v: unknown): unknown => (typeof v === "string" && v.trim() === "" ? NaN : v);

/** A query number, blank refused; `number` adds the checks (`z.number().int().min(1)`). */
export const queryNumber = <T extends z.ZodNumber>(number: T) => z.preprocess(blankAsNaN, z.coerce.number().pipe(number));
