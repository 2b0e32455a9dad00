/**
 * The alert rules (infra/prometheus/botdir-alerts.yml): promtool accepts them and the compose
 * Prometheus config, their unit tests pass, every alert has a unit test where it fires and one
 * where it stays silent (and each of those tests fails when the alert always, or never, fires),
 * each alert's runbook exists, the Kubernetes PrometheusRule is the same rules, and the rules use
 * only series the apps define. A missing promtool fails these tests: .ci/run installs it.
 */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { parseAllDocuments, parse as parseYaml } from "yaml";
import {
  alertsOf,
  groupingLabelsOf,
  promtool,
  RULES_TEST_FILE,
  type RulesFile,
  readRules,
  selectorsOf,
  testRulesAgainst,
} from "../src/alert-rules.js";
import { appSeries } from "../src/app-metrics.js";
import { REPO_ROOT } from "../src/processes.js";

const read = (file: string) => readFileSync(path.join(REPO_ROOT, file), "utf8");
const rules = readRules();
const alerts = alertsOf(rules);
const names = alerts.map((a) => a.alert);

/** The rules with one alert's expression replaced. */
function withExpr(name: string, expr: string): RulesFile {
  return {
    groups: rules.groups.map((g) => ({
      ...g,
      rules: g.rules.map((r) => (r.alert === name ? { ...r, expr } : r)),
    })),
  };
}

describe("promtool", () => {
  it("checks the rules file: it parses and every expression is valid PromQL", () => {
    const run = promtool(["check", "rules", "infra/prometheus/botdir-alerts.yml"]);
    expect(run).toMatchObject({ status: 0 });
    expect(run.output).toContain(`SUCCESS: ${alerts.length} rules found`);
  });

  it("checks the compose Prometheus config, which loads the rules file", () => {
    const run = promtool(["check", "config", "infra/prometheus/prometheus.yml"]);
    expect(run).toMatchObject({ status: 0 });
    expect(run.output).toContain("SUCCESS: 1 rule files found");
  });

  it("passes the unit tests of every alert", () => {
    const run = promtool(["test", "rules", "infra/prometheus/botdir-alerts.test.yml"]);
    expect(run.output).toContain("SUCCESS");
    expect(run.status).toBe(0);
  }, 180_000);
});

describe("unit tests of every alert", () => {
  const tests = (
    parseYaml(readFileSync(RULES_TEST_FILE, "utf8")) as {
      tests: { alert_rule_test?: { alertname: string; exp_alerts?: unknown[] }[] }[];
    }
  ).tests.flatMap((t) => t.alert_rule_test ?? []);

  it("the rules define the alerts the issue asks for, and more than none", () => {
    expect(names).toEqual(
      expect.arrayContaining([
        "BotdirOutboxDeliveryOverdue",
        "BotdirWebhookFirstAttemptsFailing",
        "BotdirRateLimiterFailingOpen",
        "BotdirHighServerErrorRatio",
        "BotdirAppNotReady",
        "BotdirAppUnavailable",
        "BotdirDeliveriesPilingUpWithoutDispatcher",
      ]),
    );
    expect(new Set(names).size).toBe(names.length);
  });

  it.each(names)("%s has a case where it fires and one where it stays silent", (name) => {
    const cases = tests.filter((t) => t.alertname === name);
    expect(cases.some((t) => (t.exp_alerts ?? []).length > 0)).toBe(true);
    expect(cases.some((t) => (t.exp_alerts ?? []).length === 0)).toBe(true);
  });

  // Two promtool runs each: generous deadlines for a loaded machine.
  it.each(names)(
    "%s: its tests fail when it always fires, and when it never fires",
    (name) => {
      const always = testRulesAgainst(withExpr(name, "vector(1)"));
      expect(always.status).not.toBe(0);
      expect(always.output).toContain(`alertname: ${name}`);
      const never = testRulesAgainst(withExpr(name, "vector(1) == 0"));
      expect(never.status).not.toBe(0);
      expect(never.output).toContain(`alertname: ${name}`);
    },
    180_000,
  );
});

describe("runbooks and labels", () => {
  const runbook = read("docs/alerts.md");
  const headings = [...runbook.matchAll(/^## (Botdir\w+)$/gm)].map((m) => m[1]);

  it.each(names)(
    "%s pages or tickets (severity), says what and why, and links its runbook section",
    (name) => {
      const rule = alerts.find((a) => a.alert === name)!;
      expect(["critical", "warning"]).toContain(rule.labels.severity);
      expect(rule.annotations.summary).toBeTruthy();
      expect(rule.annotations.description).toBeTruthy();
      // GitHub's anchor of the heading `## <name>`.
      expect(rule.annotations.runbook_url).toBe(`docs/alerts.md#${name.toLowerCase()}`);
      expect(headings).toContain(name);
    },
  );

  it("docs/alerts.md has no section for an alert that does not exist", () => {
    expect(headings.sort()).toEqual([...names].sort());
  });

  it("docs/alerts.md is linked from the README and docs/operations.md", () => {
    expect(read("README.md")).toContain("(docs/alerts.md)");
    expect(read("docs/operations.md")).toContain("(alerts.md)");
  });
});

describe("the same rules everywhere", () => {
  it("the PrometheusRule of the Kubernetes component is the rules file, as generated", () => {
    const docs = parseAllDocuments(read("infra/components/prometheus-rules/prometheusrule.yaml")).map(
      (d) => d.toJSON() as { kind: string; spec: unknown },
    );
    expect(docs).toHaveLength(1);
    expect(docs[0]?.kind).toBe("PrometheusRule");
    expect(docs[0]?.spec).toEqual(rules);
    const check = spawnSync(process.execPath, ["scripts/prometheus-rule.mjs", "--check"], {
      cwd: REPO_ROOT,
      encoding: "utf8",
    });
    expect(check.stderr).toBe("");
    expect(check.status).toBe(0);
    const component = parseYaml(read("infra/components/prometheus-rules/kustomization.yaml")) as {
      kind: string;
      resources: string[];
    };
    expect(component).toMatchObject({ kind: "Component", resources: ["prometheusrule.yaml"] });
  });

  it("compose's Prometheus (profile monitoring) mounts infra/prometheus and loads the rules file from it", () => {
    const compose = parseYaml(read("docker/compose.yml"), { merge: true }) as {
      services: Record<string, { profiles?: string[]; volumes?: string[]; command?: string[] }>;
    };
    const prometheus = compose.services.prometheus;
    expect(prometheus?.profiles).toEqual(["monitoring"]);
    expect(prometheus?.volumes).toContain("../infra/prometheus:/etc/prometheus:ro");
    expect(prometheus?.command).toContain("--config.file=/etc/prometheus/prometheus.yml");
    const config = parseYaml(read("infra/prometheus/prometheus.yml")) as {
      rule_files: string[];
      scrape_configs: { dns_sd_configs: { names: string[]; port: number }[] }[];
    };
    expect(config.rule_files).toEqual(["botdir-alerts.yml"]);
    // Every replica of every app, on the port its metrics are served on in compose.
    const scraped = config.scrape_configs.flatMap((s) =>
      s.dns_sd_configs.map((d) => `${d.names[0]}:${d.port}`),
    );
    expect(scraped.sort()).toEqual(["api:9464", "vote-ingest:3001", "webhook-dispatcher:3002"].sort());
  });
});

describe("the series the rules use", () => {
  const defined = appSeries();

  it.each(names)("%s uses only metrics and labels the apps define", (name) => {
    const rule = alerts.find((a) => a.alert === name)!;
    const selectors = selectorsOf(rule.expr);
    expect(selectors.length).toBeGreaterThan(0);
    for (const { metric, matchers } of selectors) {
      const labels = defined.get(metric);
      expect({ metric, defined: labels !== undefined }).toEqual({ metric, defined: true });
      // `app` is every registry's default label.
      for (const m of matchers) expect(["app", ...(labels ?? [])]).toContain(m.label);
      for (const label of groupingLabelsOf(rule.expr)) expect(["app", ...(labels ?? [])]).toContain(label);
    }
  });
});
