/**
 * README's configuration table against the code: every variable an env schema reads (the three
 * apps, botctl, the retention CLI, which parses the dispatcher's schema, and the migration runner)
 * is a row of the table, every variable the table names is read by something, and each row's
 * "used by" names exactly the readers. The variables come from the schemas' objects themselves,
 * so a field added to a schema without a row (or a row left behind by a removed field) fails here.
 */
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { MIGRATION_ENV } from "@botdir/db";
import { ApiEnv } from "../../apps/api/src/env.js";
import { CliEnv, IngestEnv } from "../../apps/vote-ingest/src/env.js";
import { DispatcherEnv } from "../../apps/webhook-dispatcher/src/env.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** Who reads what, by the names README's "used by" column uses. */
const READERS: Record<string, readonly string[]> = {
  api: Object.keys(ApiEnv.shape),
  "vote-ingest": Object.keys(IngestEnv.shape),
  dispatcher: Object.keys(DispatcherEnv.shape),
  botctl: Object.keys(CliEnv.shape),
  migrations: MIGRATION_ENV,
};
/** `all` in the table: the three apps. */
const ALL = ["api", "vote-ingest", "dispatcher"];

interface Row {
  variables: string[];
  usedBy: string;
}

/** The rows of the table under README's "## Configuration". */
function configurationRows(readme: string): Row[] {
  const section = readme.split(/^## /m).find((s) => s.startsWith("Configuration\n"));
  if (section === undefined) throw new Error('README has no "## Configuration" section');
  const rows: Row[] = [];
  for (const line of section.split("\n")) {
    if (!line.startsWith("| `")) continue;
    const cells = line.split("|").map((c) => c.trim());
    const [, first = "", , usedBy = ""] = cells;
    rows.push({ variables: [...first.matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((m) => m[1] as string), usedBy });
  }
  return rows;
}

/** The readers a "used by" cell names, `all` expanded; an unknown word is reported as such. */
function namedReaders(usedBy: string): string[] {
  return usedBy
    .split(",")
    .map((w) => w.trim())
    .flatMap((w) => (w === "all" ? ALL : [w]));
}

function readersOf(variable: string): string[] {
  return Object.entries(READERS)
    .filter(([, variables]) => variables.includes(variable))
    .map(([reader]) => reader);
}

/** Every disagreement between README's table and the readers, one sentence each. */
function tableProblems(readme: string): string[] {
  const rows = configurationRows(readme);
  const documented = rows.flatMap((r) => r.variables);
  const read = [...new Set(Object.values(READERS).flat())];
  const known = new Set(Object.keys(READERS));
  const problems = [
    ...read
      .filter((v) => !documented.includes(v))
      .map((v) => `${v} is read by ${readersOf(v).join(", ")} but has no row`),
    ...documented.filter((v) => !read.includes(v)).map((v) => `${v} has a row but nothing reads it`),
    ...documented.filter((v, i) => documented.indexOf(v) !== i).map((v) => `${v} has two rows`),
  ];
  for (const row of rows) {
    const named = namedReaders(row.usedBy);
    for (const variable of row.variables.filter((v) => read.includes(v))) {
      const unknown = named.filter((n) => !known.has(n));
      const actual = readersOf(variable);
      if (unknown.length > 0) problems.push(`${variable}: "used by" names unknown ${unknown.join(", ")}`);
      else if (named.length !== actual.length || !actual.every((r) => named.includes(r))) {
        problems.push(`${variable}: "used by" says "${row.usedBy}", read by ${actual.join(", ")}`);
      }
    }
  }
  return problems;
}

const readme = readFileSync(path.join(root, "README.md"), "utf8");

describe("README's configuration table", () => {
  it("has one row for every variable an env schema reads, none for a variable nothing reads, and says exactly who reads each", () => {
    expect(tableProblems(readme)).toEqual([]);
  });

  it("when a variable read has no row, a row names a variable nothing reads, or a reader is left out, then the check says so", () => {
    const broken = readme
      .replace(/^\| `API_PORT` .*\n/m, "")
      .replace(/^(\| `METRICS_PORT` .*\n)/m, "$1| `NO_SUCH_VARIABLE` | none | api | nothing |\n")
      .replace(/^\| `INGEST_PORT` \| `3001` \| vote-ingest \|/m, "| `INGEST_PORT` | `3001` | api |");
    expect(tableProblems(broken)).toEqual([
      "API_PORT is read by api but has no row",
      "NO_SUCH_VARIABLE has a row but nothing reads it",
      'INGEST_PORT: "used by" says "api", read by vote-ingest',
    ]);
  });
});
