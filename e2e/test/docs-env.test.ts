/**
 * README's configuration table against the code: every variable an env schema reads (the three
 * apps, botctl, the retention CLI, which parses the dispatcher's schema, and the migration runner)
 * is a row of the table, every variable the table names is read by something, and each row's
 * "used by" names exactly the readers. The variables come from the schemas' objects themselves,
 * so a field added to a schema without a row (or a row left behind by a removed field) fails here.
 *
 * docs/operations.md's "Environment variables" tables against the same schemas, app by app: the
 * common table and an app's own table together list exactly the variables that app reads, and
 * every row of the common table is read by all three.
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

/** The variables a table's first cell names. */
function variablesOf(cell: string): string[] {
  return [...cell.matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((m) => m[1] as string);
}

/** The `## <title>` section of a markdown document, up to the next `## `. */
function sectionOf(doc: string, title: string): string {
  const section = doc.split(/^## /m).find((s) => s.startsWith(`${title}\n`));
  if (section === undefined) throw new Error(`no "## ${title}" section`);
  return section;
}

/** The rows of the table under README's "## Configuration". */
function configurationRows(readme: string): Row[] {
  const rows: Row[] = [];
  for (const line of sectionOf(readme, "Configuration").split("\n")) {
    if (!line.startsWith("| `")) continue;
    const cells = line.split("|").map((c) => c.trim());
    const [, first = "", , usedBy = ""] = cells;
    rows.push({ variables: variablesOf(first), usedBy });
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

/** docs/operations.md's per-app tables, each introduced by a line `<app>:`, and their readers. */
const OPERATIONS_APPS: Record<string, string> = {
  api: "api",
  "vote-ingest": "vote-ingest",
  "webhook-dispatcher": "dispatcher",
};
/** The table of the variables every app reads. */
const COMMON_TABLE = "Common to the three apps:";

interface Table {
  /** The line before the table ("api:"); empty when a table directly follows another. */
  intro: string;
  variables: string[];
}

/** The tables of docs/operations.md's "## Environment variables", each with the line introducing it. */
function environmentTables(operations: string): Table[] {
  const tables: Table[] = [];
  let intro = "";
  let table: Table | undefined;
  for (const line of sectionOf(operations, "Environment variables").split("\n")) {
    if (!line.startsWith("|")) {
      table = undefined;
      if (line.trim() !== "") intro = line.trim();
      continue;
    }
    if (table === undefined) {
      table = { intro, variables: [] };
      tables.push(table);
      intro = "";
    }
    if (line.startsWith("| `")) table.variables.push(...variablesOf(line.split("|")[1] ?? ""));
  }
  return tables;
}

/** Every disagreement between docs/operations.md's tables and the apps' schemas, one sentence each. */
function operationsProblems(operations: string): string[] {
  const tables = environmentTables(operations);
  const problems: string[] = [];
  for (const { intro, variables } of tables) {
    if (intro === COMMON_TABLE || intro.slice(0, -1) in OPERATIONS_APPS) continue;
    problems.push(
      intro === ""
        ? `the rows from ${variables[0] ?? "(none)"} on follow another table without a line naming their app`
        : `the table under "${intro}" is not one of the apps'`,
    );
  }
  const rowsUnder = (intro: string): string[] | undefined => tables.find((t) => t.intro === intro)?.variables;
  const common = rowsUnder(COMMON_TABLE);
  if (common === undefined) return [...problems, `no table under "${COMMON_TABLE}"`];
  for (const variable of common) {
    for (const [app, reader] of Object.entries(OPERATIONS_APPS)) {
      if (!READERS[reader]?.includes(variable)) {
        problems.push(`${variable} is in the common table but ${app} does not read it`);
      }
    }
  }
  for (const [app, reader] of Object.entries(OPERATIONS_APPS)) {
    const own = rowsUnder(`${app}:`);
    if (own === undefined) {
      problems.push(`no table under "${app}:"`);
      continue;
    }
    const read = READERS[reader] ?? [];
    const documented = [...common, ...own];
    problems.push(
      ...read
        .filter((v) => !documented.includes(v))
        .map((v) => `${v} is read by ${app} but is in neither its table nor the common one`),
      ...own
        .filter((v) => !read.includes(v))
        .map((v) => `${v} is in the ${app} table but ${app} does not read it`),
      ...documented.filter((v, i) => documented.indexOf(v) !== i).map((v) => `${v} has two rows for ${app}`),
    );
  }
  return problems;
}

const readme = readFileSync(path.join(root, "README.md"), "utf8");
const operations = readFileSync(path.join(root, "docs/operations.md"), "utf8");

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

describe("docs/operations.md's environment variable tables", () => {
  it("list, with the common table, exactly the variables each app reads, and the common table only what all three read", () => {
    expect(operationsProblems(operations)).toEqual([]);
  });

  it("when an app's variable has no row, a row names a variable the app does not read, or a table is split, then the check says so", () => {
    const broken = operations
      .replace(/^\| `API_PORT` .*\n/m, "")
      .replace(/^(\| `METRICS_PORT` .*\n)/m, "$1| `NO_SUCH_VARIABLE` | none | nothing |\n")
      .replace(/^(\| `NODE_ENV` .*\n)/m, "$1| `INGEST_PORT` | `3001` | internal endpoints |\n")
      .replace(/^(\| `WEBHOOK_RETENTION_DAYS` )/m, "\n$1");
    expect(operationsProblems(broken)).toEqual([
      "the rows from WEBHOOK_RETENTION_DAYS on follow another table without a line naming their app",
      "INGEST_PORT is in the common table but api does not read it",
      "INGEST_PORT is in the common table but webhook-dispatcher does not read it",
      "API_PORT is read by api but is in neither its table nor the common one",
      "NO_SUCH_VARIABLE is in the api table but api does not read it",
      "INGEST_PORT has two rows for vote-ingest",
      "WEBHOOK_RETENTION_DAYS is read by webhook-dispatcher but is in neither its table nor the common one",
      "WEBHOOK_RETENTION_INTERVAL_S is read by webhook-dispatcher but is in neither its table nor the common one",
      "WEBHOOK_RETENTION_BATCH is read by webhook-dispatcher but is in neither its table nor the common one",
    ]);
  });
});
