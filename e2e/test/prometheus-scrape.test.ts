/**
 * The alert rules against the real thing: the three apps started from their build output
 * (`dist/`, as the images run them) and a real Prometheus (Debian's `prometheus`, 1 s scrapes and
 * rule evaluations, on a spare port) scraping them with infra/prometheus/botdir-alerts.yml loaded.
 * After a vote is delivered and a /check answered, every metric and label each rule selects
 * exists in Prometheus, every rule evaluates without error, no app is reported unavailable, and a
 * delivery whose secret no key decrypts fires BotdirWebhookSecretsUnreadable.
 * Needs `pnpm build` first (turbo builds the apps before this package's tests).
 */
import { existsSync } from "node:fs";
import path from "node:path";
import {
  createTestDatabase,
  randomUserId,
  type TestDatabase,
  testRedisPrefix,
  testRedisUrl,
} from "@botdir/db/testing";
import { waitFor } from "@botdir/service-kit/testing";
import {
  alertsOf,
  groupingLabelsOf,
  type PrometheusServer,
  RULES_FILE,
  readRules,
  selectorsOf,
  startPrometheus,
} from "../src/alert-rules.js";
import {
  type AppName,
  type AppProcess,
  freePort,
  freshKeys,
  REPO_ROOT,
  startApp,
  stopAll,
} from "../src/processes.js";
import { type Receiver, startReceiver } from "../src/receivers.js";
import { appEnv, castVote, seedWebhookBot } from "../src/stack.js";

const APPS: AppName[] = ["api", "vote-ingest", "webhook-dispatcher"];
const alerts = alertsOf(readRules());

/**
 * Positive matchers a healthy stack cannot satisfy: nothing answers 5xx when everything works
 * (bad input never gives a 500). Their label must still exist.
 */
const UNREACHABLE_ON_A_HEALTHY_STACK = new Set(['botdir_http_requests_total{status=~"5.."}']);

let t: TestDatabase;
let receiver: Receiver;
let prometheus: PrometheusServer;
const apps = {} as Record<AppName, AppProcess>;
const keys = freshKeys();

beforeAll(async () => {
  for (const app of APPS) {
    const main = path.join(REPO_ROOT, "apps", app, "dist", "main.js");
    if (!existsSync(main)) throw new Error(`${main} is missing: run pnpm build first`);
  }
  [t, receiver] = await Promise.all([createTestDatabase(), startReceiver()]);
  const env = appEnv(
    { databaseUrl: t.url, redisUrl: testRedisUrl(), keys },
    { QUEUE_PREFIX: `{${testRedisPrefix().slice(0, -1)}}` },
  );
  const metricsPort = await freePort();
  await Promise.all(
    APPS.map(async (app) => {
      const extra: Record<string, string> = app === "api" ? { METRICS_PORT: String(metricsPort) } : {};
      apps[app] = await startApp(app, { ...env, ...extra }, { dist: true });
    }),
  );
  prometheus = await startPrometheus({
    targets: [
      `127.0.0.1:${metricsPort}`,
      `127.0.0.1:${apps["vote-ingest"].port}`,
      `127.0.0.1:${apps["webhook-dispatcher"].port}`,
    ],
    ruleFiles: [RULES_FILE],
  });
}, 240_000);

afterAll(async () => {
  await prometheus?.stop();
  await stopAll();
  await receiver?.close();
  await t?.drop();
});

/** What Prometheus lacks of what the rules select: one sentence per missing thing. */
async function missingSeries(): Promise<string[]> {
  const problems: string[] = [];
  for (const rule of alerts) {
    for (const { metric, matchers } of selectorsOf(rule.expr)) {
      const labels = new Set([...matchers.map((m) => m.label), ...groupingLabelsOf(rule.expr)]);
      for (const label of labels) {
        const found = await prometheus.query(`count by (${label}) ({__name__="${metric}", ${label}!=""})`);
        if (found.length === 0) problems.push(`${rule.alert}: no ${metric} series with a ${label} label`);
      }
      for (const m of matchers.filter((x) => x.op === "=" || x.op === "=~")) {
        const selector = `${metric}{${m.label}${m.op}"${m.value}"}`;
        if (UNREACHABLE_ON_A_HEALTHY_STACK.has(selector)) continue;
        const found = await prometheus.query(`count({__name__="${metric}", ${m.label}${m.op}"${m.value}"})`);
        if (found.length === 0) problems.push(`${rule.alert}: no series ${selector}`);
      }
      if (matchers.length === 0) {
        const found = await prometheus.query(`count({__name__="${metric}"})`);
        if (found.length === 0) problems.push(`${rule.alert}: no series ${metric}`);
      }
    }
  }
  return problems;
}

async function activeAlerts(name: string, state: "pending|firing" | "firing" = "pending|firing") {
  return prometheus.query(`ALERTS{alertname="${name}", alertstate=~"${state}"}`);
}

describe("the alert rules on a real Prometheus scraping the apps from dist/", () => {
  it("when a vote was delivered and a /check answered, then every metric and label each rule selects exists", async () => {
    const bot = await seedWebhookBot(t.db, keys, receiver.url("/hook"));
    const vote = await castVote(apps["vote-ingest"].base, keys.internalKey, bot.id, randomUserId());
    expect(vote.status).toBe(201);
    await waitFor(() => receiver.forPath("/hook").length > 0, "the vote's webhook delivery", 60_000);
    await waitFor(
      async () => {
        const res = await fetch(`${apps.api.base}/api/v1/bots/${bot.id}/check?userId=${randomUserId()}`, {
          headers: { authorization: bot.token },
        });
        await res.arrayBuffer();
        return res.status === 200;
      },
      "a /check answered 200",
      60_000,
    );

    let problems: string[] = [];
    try {
      await waitFor(
        async () => {
          problems = await missingSeries();
          return problems.length === 0;
        },
        "Prometheus to hold every series the rules select",
        90_000,
        1_000,
      );
    } catch {
      throw new Error(`missing in Prometheus:\n${problems.join("\n")}\n${prometheus.output()}`);
    }
    expect(problems).toEqual([]);
  });

  it("every rule loads and evaluates without error, and with every app ready none is reported not ready or unavailable", async () => {
    await waitFor(
      async () => {
        const rules = await prometheus.rules();
        return rules.length === alerts.length && rules.every((r) => r.health === "ok");
      },
      "every rule evaluated once",
      60_000,
      500,
    );
    const rules = await prometheus.rules();
    expect(rules.map((r) => [r.name, r.health, r.lastError ?? ""]).sort()).toEqual(
      alerts.map((a) => [a.alert, "ok", ""]).sort(),
    );
    // Every app reports itself ready under its own `app` label (absent() would fire otherwise).
    const ready = await prometheus.query("botdir_ready");
    expect(ready.map((s) => [s.metric.app, s.value[1]]).sort()).toEqual(APPS.map((app) => [app, "1"]).sort());
    // The readiness rules' first evaluations may predate the first scrapes (absent() is true then,
    // so they start pending): judge them by an evaluation made after every app was seen ready
    // (the query above read the stored samples, so any later evaluation sees them too).
    const seenReadyAt = Date.now();
    await waitFor(
      async () =>
        (await prometheus.rules())
          .filter((r) => r.name === "BotdirAppUnavailable" || r.name === "BotdirAppNotReady")
          .every((r) => Date.parse(r.lastEvaluation) > seenReadyAt),
      "the readiness rules evaluated after every app was seen ready",
      60_000,
      250,
    );
    expect(await activeAlerts("BotdirAppUnavailable")).toEqual([]);
    expect(await activeAlerts("BotdirAppNotReady")).toEqual([]);
  });

  it("when a delivery's secret cannot be decrypted, then BotdirWebhookSecretsUnreadable fires and the receiver got nothing", async () => {
    // The zero series must be in Prometheus before the failure, for the failure to be an increase.
    await waitFor(
      async () =>
        (
          await prometheus.query(
            'count_over_time(botdir_webhook_attempts_total{error_kind="secret_unreadable"}[1m]) >= 2',
          )
        ).length > 0,
      "two scrapes of the unreadable-secret series at 0",
      60_000,
      500,
    );
    expect(await activeAlerts("BotdirWebhookSecretsUnreadable")).toEqual([]);

    // A secret encrypted under a key the apps do not have.
    const bot = await seedWebhookBot(t.db, freshKeys(), receiver.url("/unreadable"));
    const vote = await castVote(apps["vote-ingest"].base, keys.internalKey, bot.id, randomUserId());
    expect(vote.status).toBe(201);

    await waitFor(
      async () => (await activeAlerts("BotdirWebhookSecretsUnreadable", "firing")).length > 0,
      "BotdirWebhookSecretsUnreadable to fire",
      60_000,
      500,
    );
    const [firing] = await activeAlerts("BotdirWebhookSecretsUnreadable", "firing");
    expect(firing?.metric).toMatchObject({ severity: "critical" });
    expect(receiver.forPath("/unreadable")).toEqual([]);
  });
});
