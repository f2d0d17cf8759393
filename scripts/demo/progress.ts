/** The reward as the terminal can draw it: a bar per step, a sparkline for the whole curve. */
const BLOCKS = " ▏▎▍▌▋▊▉█";
const SPARKS = "▁▂▃▄▅▆▇█";
const WIDTH = 30;

/** A bar WIDTH characters wide, filled in eighths: 0 empty, 1 full. */
export function rewardBar(v: number): string {
  const eighths = Math.round(Math.min(1, Math.max(0, v)) * WIDTH * 8);
  const full = Math.floor(eighths / 8);
  const part = eighths % 8;
  return `|${"█".repeat(full)}${part ? BLOCKS[part] : ""}${" ".repeat(WIDTH - full - (part ? 1 : 0))}|`;
}

/** One character per value on a 0..1 scale. */
export function sparkline(values: number[]): string {
  return values.map((v) => SPARKS[Math.round(Math.min(1, Math.max(0, v)) * (SPARKS.length - 1))]).join("");
}
