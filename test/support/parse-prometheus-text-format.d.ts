/** The parser the metrics test reads the exposition with: it ships no types. Its output follows prom2json's. */
declare module "parse-prometheus-text-format" {
  type Sample = { value: string; labels?: Record<string, string> };
  type Family = { name: string; help: string; type: string; metrics: Sample[] };
  export default function parsePrometheusTextFormat(text: string): Family[];
}
