/**
 * The committed results file is the median of the day's runs with their range, not the best run:
 * every run is kept in bench/results/runs/<timestamp>.json, and bench/results/<date>.json is
 * rebuilt from all runs of that date after each run: every number becomes its median, and `range`
 * holds [min, max] of it across the runs. Runs of the apps under another Node line (BENCH_NODE)
 * go to bench/results/<date>-node<major>.json instead.
 */
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  const m = s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
  return Math.round(m * 100) / 100;
}

/** Median of every numeric leaf (present in at least one run); other leaves from the last run. */
function combine(values: Json[]): { median: Json; range: Json } {
  const numbers = values.filter((v): v is number => typeof v === "number" && Number.isFinite(v));
  if (numbers.length > 0 && numbers.length === values.filter((v) => typeof v === "number").length) {
    return { median: median(numbers), range: [Math.min(...numbers), Math.max(...numbers)] };
  }
  const objects = values.filter(
    (v): v is { [k: string]: Json } => typeof v === "object" && v !== null && !Array.isArray(v),
  );
  if (objects.length > 0 && objects.length === values.length) {
    const keys = [...new Set(objects.flatMap((o) => Object.keys(o)))];
    const med: { [k: string]: Json } = {};
    const rng: { [k: string]: Json } = {};
    for (const k of keys) {
      const c = combine(objects.filter((o) => k in o).map((o) => o[k] as Json));
      med[k] = c.median;
      if (c.range !== null) rng[k] = c.range;
    }
    return { median: med, range: Object.keys(rng).length > 0 ? rng : null };
  }
  return { median: values.at(-1) ?? null, range: null };
}

/**
 * Runs whose apps ran under another Node line than the bench's own (BENCH_NODE, e.g. the
 * production image's) are aggregated apart: "-node<major>"; "" for the default runtime.
 */
function runtimeVariant(run: Json): string {
  const machine = typeof run === "object" && run !== null && !Array.isArray(run) ? run.machine : null;
  if (typeof machine !== "object" || machine === null || Array.isArray(machine)) return "";
  const major = (v: Json | undefined) => (typeof v === "string" ? /^v(\d+)\./.exec(v)?.[1] : undefined);
  const app = major(machine.appNode);
  return app !== undefined && app !== major(machine.node) ? `-node${app}` : "";
}

/**
 * Saves this run and rewrites the day's file from every full run of the day; returns its path.
 * A partial run (a BENCH_ONLY subset, shorter rounds) goes to runs/partial/ and is not aggregated.
 */
export function saveRun(
  resultsDir: string,
  report: { date: string } & Record<string, unknown>,
  options: { full: boolean },
): string {
  const runsDir = path.join(resultsDir, "runs");
  const name = `${report.date.replace(/[:.]/g, "-")}.json`;
  if (!options.full) {
    mkdirSync(path.join(runsDir, "partial"), { recursive: true });
    const file = path.join(runsDir, "partial", name);
    writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
    return file;
  }
  mkdirSync(runsDir, { recursive: true });
  const day = report.date.slice(0, 10);
  writeFileSync(path.join(runsDir, name), `${JSON.stringify(report, null, 2)}\n`);
  const variant = runtimeVariant(report as Json);
  const runs = readdirSync(runsDir)
    .filter((f) => f.startsWith(day) && f.endsWith(".json"))
    .sort()
    .map((f) => ({ file: f, data: JSON.parse(readFileSync(path.join(runsDir, f), "utf8")) as Json }))
    .filter((r) => runtimeVariant(r.data) === variant);
  const { median: med, range } = combine(runs.map((r) => r.data));
  const file = path.join(resultsDir, `${day}${variant}.json`);
  const summary = {
    date: day,
    note: "every number is the median of the day's runs; range holds [min, max] across them",
    runs: runs.map((r) => r.file),
    median: med,
    range,
  };
  writeFileSync(file, `${JSON.stringify(summary, null, 2)}\n`);
  return file;
}
