/**
 * botdir's alert rules (infra/prometheus/botdir-alerts.yml) as data, the series selectors their
 * expressions use, promtool, and a real Prometheus server on a spare port: what
 * e2e/test/alert-rules.test.ts and e2e/test/prometheus-scrape.test.ts need.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { waitFor } from "@botdir/service-kit/testing";
import { freePort } from "@botdir/test-stores";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import { REPO_ROOT } from "./processes.js";

export const RULES_FILE = path.join(REPO_ROOT, "infra/prometheus/botdir-alerts.yml");
export const RULES_TEST_FILE = path.join(REPO_ROOT, "infra/prometheus/botdir-alerts.test.yml");

export interface AlertRule {
  alert: string;
  expr: string;
  for?: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

export interface RulesFile {
  groups: { name: string; rules: AlertRule[] }[];
}

export function readRules(file = RULES_FILE): RulesFile {
  return parseYaml(readFileSync(file, "utf8")) as RulesFile;
}

export function alertsOf(rules: RulesFile): AlertRule[] {
  return rules.groups.flatMap((g) => g.rules);
}

/** One label matcher of a selector: `status=~"5.."`. */
export interface Matcher {
  label: string;
  op: "=" | "!=" | "=~" | "!~";
  value: string;
}

/** A series selector: a metric name, its matchers, and the labels the expression groups it by. */
export interface Selector {
  metric: string;
  matchers: Matcher[];
}

/**
 * The series selectors of a PromQL expression (metric names are `botdir_*` here), e.g.
 * `rate(botdir_http_requests_total{app="api",status=~"5.."}[5m])` → one selector with two
 * matchers. Enough PromQL for our rules: no string literals outside matchers.
 */
export function selectorsOf(expr: string): Selector[] {
  const selectors: Selector[] = [];
  for (const m of expr.matchAll(/\b(botdir_[a-z0-9_]+)\s*(\{([^}]*)\})?/g)) {
    const matchers = [...(m[3] ?? "").matchAll(/([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"/g)].map(
      (x) => ({ label: x[1]!, op: x[2] as Matcher["op"], value: x[3]! }),
    );
    selectors.push({ metric: m[1]!, matchers });
  }
  return selectors;
}

/** The labels of `by (…)` and `without (…)` clauses of an expression. */
export function groupingLabelsOf(expr: string): string[] {
  return [...expr.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g)].flatMap((m) =>
    m[1]!
      .split(",")
      .map((l) => l.trim())
      .filter(Boolean),
  );
}

/** promtool's path; throws (never skips) when Debian's `prometheus` package is not installed. */
export function promtoolPath(): string {
  return toolPath("promtool");
}

function toolPath(name: string): string {
  const found = spawnSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" }).stdout.trim();
  if (!found) {
    throw new Error(
      `${name} is missing: install Debian's prometheus package (apt-get install prometheus); .ci/run does`,
    );
  }
  return found;
}

export interface ToolRun {
  status: number | null;
  output: string;
}

export function promtool(args: string[], cwd = REPO_ROOT): ToolRun {
  const run = spawnSync(promtoolPath(), args, { cwd, encoding: "utf8", timeout: 120_000 });
  return { status: run.status, output: `${run.stdout ?? ""}${run.stderr ?? ""}` };
}

/**
 * Runs the unit tests of RULES_TEST_FILE against `rules` (a changed copy of the rules), in a
 * temporary directory: what `promtool test rules` says of them.
 */
export function testRulesAgainst(rules: RulesFile): ToolRun {
  const dir = mkdtempSync(path.join(tmpdir(), "botdir-rules-"));
  try {
    writeFileSync(path.join(dir, "botdir-alerts.yml"), stringifyYaml(rules));
    writeFileSync(path.join(dir, "botdir-alerts.test.yml"), readFileSync(RULES_TEST_FILE, "utf8"));
    return promtool(["test", "rules", "botdir-alerts.test.yml"], dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A rule as Prometheus's rules API reports it (`lastEvaluation`: an RFC 3339 time). */
export interface PrometheusRuleState {
  name: string;
  health: string;
  lastError?: string;
  type: string;
  lastEvaluation: string;
}

export interface PrometheusServer {
  base: string;
  /** An instant query; the result vector. */
  query(promql: string): Promise<{ metric: Record<string, string>; value: [number, string] }[]>;
  /** GET /api/v1/rules: every rule with its health, last error and when it was last evaluated. */
  rules(): Promise<PrometheusRuleState[]>;
  output(): string;
  stop(): Promise<void>;
}

/**
 * A real Prometheus (Debian's `prometheus` binary) on a spare loopback port with its data in a
 * temporary directory, scraping `targets` every second and evaluating `ruleFiles` every second.
 * Ready when returned.
 */
export async function startPrometheus(options: {
  targets: string[];
  ruleFiles?: string[];
}): Promise<PrometheusServer> {
  const binary = toolPath("prometheus");
  const dir = mkdtempSync(path.join(tmpdir(), "botdir-prometheus-"));
  const port = await freePort();
  const config = {
    global: { scrape_interval: "1s", scrape_timeout: "1s", evaluation_interval: "1s" },
    rule_files: options.ruleFiles ?? [],
    scrape_configs: [{ job_name: "botdir", static_configs: [{ targets: options.targets }] }],
  };
  writeFileSync(path.join(dir, "prometheus.yml"), stringifyYaml(config));
  const child: ChildProcess = spawn(
    binary,
    [
      `--config.file=${path.join(dir, "prometheus.yml")}`,
      `--storage.tsdb.path=${path.join(dir, "data")}`,
      `--web.listen-address=127.0.0.1:${port}`,
      "--log.level=warn",
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-50_000);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const base = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  const api = async <T>(pathAndQuery: string): Promise<T> => {
    const res = await fetch(`${base}${pathAndQuery}`, { signal: AbortSignal.timeout(10_000) });
    const body = (await res.json()) as { status: string; data: T; error?: string };
    if (body.status !== "success") throw new Error(`Prometheus ${pathAndQuery}: ${body.error}`);
    return body.data;
  };
  try {
    await waitFor(
      async () => {
        if (child.exitCode !== null) throw new Error(`prometheus exited: ${output}`);
        const res = await fetch(`${base}/-/ready`, { signal: AbortSignal.timeout(2_000) });
        await res.arrayBuffer();
        return res.ok;
      },
      "Prometheus to be ready",
      60_000,
      100,
    );
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    base,
    async query(promql) {
      const data = await api<{ result: { metric: Record<string, string>; value: [number, string] }[] }>(
        `/api/v1/query?query=${encodeURIComponent(promql)}`,
      );
      return data.result;
    },
    async rules() {
      const data = await api<{ groups: { rules: PrometheusRuleState[] }[] }>("/api/v1/rules");
      return data.groups.flatMap((g) => g.rules);
    },
    output: () => output,
    stop,
  };
}
