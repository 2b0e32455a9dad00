/**
 * `pnpm test:failover`: the stores fail over as production stores do, under load. Builds the apps,
 * starts a PostgreSQL primary with a synchronous streaming standby (initdb, pg_basebackup -R) on
 * spare ports, a fault proxy in front of each, PgBouncer in front of the primary's proxy (the apps'
 * DATABASE_URL in transaction mode, DATABASE_DIRECT_URL through a session-mode entry of the same
 * PgBouncer), a Redis Cluster of 3 masters + 3 replicas behind fault proxies, then 2 API, 2
 * vote-ingest and 2 webhook-dispatcher replicas from dist/ under ~100 votes/s + checks, and in turn:
 *
 *   1. PostgreSQL: the primary's postmaster SIGKILLed, the standby promoted, PgBouncer's
 *      `[databases]` rewritten to the standby and RELOADed;
 *   2. Redis: the master serving the queue's slot SIGKILLed (its replica takes over);
 *   3. Redis answering 100 ms late for 10 s (every node's proxy);
 *   4. PostgreSQL stalled for 3 s (the new primary's proxy holds every byte).
 *
 * One line of figures per fault; exits 1 with every broken promise listed: a vote answered 201
 * missing from the new primary's vote log or never delivered, the PostgreSQL outage after the
 * repoint longer than 3 s, the API's LISTEN connections not on the new primary within 3 s of the
 * repoint, an app process that exited, an answer 5xx while Redis failed over or was slow, a request
 * that timed out, duplicate deliveries not under 0.5 %.
 *
 * Options: `--no-build` (dist/ is current); `--pgbouncer-defaults` (PgBouncer without the failover
 * settings of docs/scaling.md, to see what they buy: the run fails on the outage). The replicas listen on FAILOVER_PORT_BASE (17120) and
 * up, PgBouncer on FAILOVER_PORT_BASE - 10; everything else on free ports.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createDb, type Db } from "@botdir/db";
import { DEFAULT_QUEUE_PREFIX } from "@botdir/schema";
import { type FaultProxy, type PostgresPair, startFaultProxy, startPostgresPair } from "@botdir/test-stores";
import { REPO_ROOT, sleep } from "../processes.js";
import type { Outcome } from "./balancer.js";
import {
  type Bot,
  createBot,
  type Fleet,
  faultRunner,
  type RequestKind,
  startFleet,
  startLoad,
  tallyDeliveries,
} from "./phases.js";
import { statusList } from "./tally.js";
import { startTopology, type Topology } from "./topology.js";

const args = new Set(process.argv.slice(2));
const started = Date.now();
const elapsed = () => ((Date.now() - started) / 1000).toFixed(1);
const log = (line: string) => process.stdout.write(`[failover ${elapsed()} s] ${line}\n`);

const LOAD = { votesPerSecond: 100, checksPerSecond: 60, statsPerSecond: 5 };
const WEBHOOK_BOTS = 20;
/** The promise of docs/scaling.md: every connection on the new primary within this of the repoint. */
const FOLLOW_MS = 3_000;
const TOKEN_LISTEN_APPLICATION_NAME = "botdir-token-listen";
/** Fault start times (ms from the load's start) and the load's length. */
const TIMELINE = {
  postgres: 8_000,
  redisKill: 25_000,
  redisSlow: 40_000,
  postgresStall: 56_000,
  end: 66_000,
};
/** The suite's budget, build excluded. */
const BUDGET_MS = 240_000;

/** What the clients saw while one fault lasted (from its start until the next one). */
interface Window {
  label: string;
  from: number;
  to: number;
  statuses: Map<number, number>;
  serverErrors: number;
  /** 5xx answers without Retry-After (the spec's 500 always carries it). */
  withoutRetryAfter: number;
  /** Requests that never got an answer (no ready replica, reset, timeout). */
  unanswered: Map<string, number>;
  /** Checks answered 200 without RateLimit-Remaining: the limiter failed open. */
  failOpen: number;
  checkMs: number[];
  /** Ms from `mark` (the repoint) to the first vote answered 201 after it. */
  first201AfterMarkMs: number | null;
  mark: number | null;
  notes: string[];
}

function newWindow(label: string, from: number): Window {
  return {
    label,
    from,
    to: Number.POSITIVE_INFINITY,
    statuses: new Map(),
    serverErrors: 0,
    withoutRetryAfter: 0,
    unanswered: new Map(),
    failOpen: 0,
    checkMs: [],
    first201AfterMarkMs: null,
    mark: null,
    notes: [],
  };
}

function observeInto(window: Window, kind: RequestKind, outcome: Outcome, answeredAt: number): void {
  if (outcome.kind !== "answered") {
    window.unanswered.set(outcome.kind, (window.unanswered.get(outcome.kind) ?? 0) + 1);
    return;
  }
  window.statuses.set(outcome.status, (window.statuses.get(outcome.status) ?? 0) + 1);
  if (outcome.status >= 500) {
    window.serverErrors++;
    if (typeof outcome.headers["retry-after"] !== "string") window.withoutRetryAfter++;
  }
  if (kind === "checks") {
    window.checkMs.push(outcome.ms);
    if (outcome.status === 200 && typeof outcome.headers["ratelimit-remaining"] !== "string")
      window.failOpen++;
  }
  if (
    kind === "votes" &&
    outcome.status === 201 &&
    window.mark !== null &&
    answeredAt >= window.mark &&
    window.first201AfterMarkMs === null
  )
    window.first201AfterMarkMs = answeredAt - window.mark;
}

const p99 = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length * 0.99)] ?? 0;

/** GET `path` on `base`, its status (0: no answer within 2 s). */
async function statusOf(base: string, path: string): Promise<number> {
  try {
    const response = await fetch(new URL(path, base), { signal: AbortSignal.timeout(2_000) });
    await response.arrayBuffer();
    return response.status;
  } catch {
    return 0;
  }
}

class SetupError extends Error {}

async function main(): Promise<number> {
  if (!args.has("--no-build")) {
    log("building the apps (turbo run build)");
    const built = spawnSync("pnpm", ["exec", "turbo", "run", "build", "--output-logs=errors-only"], {
      cwd: REPO_ROOT,
      stdio: ["ignore", "inherit", "inherit"],
    });
    if (built.status !== 0) {
      process.stdout.write("failover: FAILED: the build failed\n");
      return 1;
    }
  }
  const setupStarted = Date.now();
  const problems: string[] = [];
  const lines: string[] = [];
  let pair: PostgresPair | undefined;
  const proxies: FaultProxy[] = [];
  let topology: Topology | undefined;
  let fleet: Fleet | undefined;
  let standbyDb: Db | undefined;
  try {
    try {
      pair = await startPostgresPair({ log });
      const toPrimary = await startFaultProxy(pair.primary.port);
      const toStandby = await startFaultProxy(pair.standby.port);
      proxies.push(toPrimary, toStandby);
      topology = await startTopology({
        distributed: true,
        serverUrl: pair.primary.url(),
        poolerTargetUrl: `postgresql://postgres@127.0.0.1:${toPrimary.port}/postgres`,
        directThroughPooler: true,
        poolerFailoverSettings: !args.has("--pgbouncer-defaults"),
        redis: { replicas: 1, proxied: true },
        portBase: Number(process.env.FAILOVER_PORT_BASE || 17120),
        log,
      });
    } catch (error) {
      throw new SetupError((error as Error).message);
    }
    const t = topology;
    const [toPrimary, toStandby] = proxies as [FaultProxy, FaultProxy];
    const pgbouncer = t.pgbouncer;
    if (!pgbouncer) throw new Error("no PgBouncer");
    // The standby itself (not through the pooler): where the LISTEN sessions must show up.
    const watcher = createDb({
      url: pair.standby.url(t.databaseName),
      poolMax: 1,
      connectionTimeoutMs: 5_000,
    });
    standbyDb = watcher;
    log(
      `redis cluster ${t.redis.ports.length} nodes (3 masters + 3 replicas) behind fault proxies; pgbouncer ${pgbouncer.port} → proxy ${toPrimary.port} → primary ${pair.primary.port}; standby ${pair.standby.port} behind proxy ${toStandby.port}`,
    );

    fleet = await startFleet(t, { api: 2, "vote-ingest": 2, "webhook-dispatcher": 2 }, log);
    const f = fleet;
    const bots: Bot[] = [];
    for (let i = 0; i < WEBHOOK_BOTS; i++) bots.push(await createBot(f, t, true));
    log(
      `${bots.length} bots with webhooks; load ${LOAD.votesPerSecond} votes/s, ${LOAD.checksPerSecond} checks/s`,
    );
    log(`setup took ${((Date.now() - setupStarted) / 1000).toFixed(1)} s`);

    const load = startLoad(f, bots, LOAD);
    const { now, at } = load;
    const windows: Window[] = [];
    let current: Window | undefined;
    const open = (label: string) => {
      if (current) current.to = now();
      current = newWindow(label, now());
      windows.push(current);
      return current;
    };
    load.observe((kind, outcome, sentAt, answeredAt) => {
      // A request belongs to the fault that was on when it was sent.
      const window = windows.findLast((w) => sentAt >= w.from);
      if (window) observeInto(window, kind, outcome, answeredAt);
    });
    const { faults, fault } = faultRunner(load, log);
    let listenFollowMs: number | null = null;
    let apiReplicas = 0;

    const timeline = (async () => {
      // ---- 1. PostgreSQL: primary killed, standby promoted, PgBouncer repointed ----
      await at(TIMELINE.postgres);
      const w1 = open("PostgreSQL primary kill -9, standby promoted, PgBouncer repointed");
      await fault(w1.label, async () => {
        const pid = pair?.primary.pid();
        await pair?.killPrimary();
        const killedAt = now();
        const promoteMs = (await pair?.promoteStandby()) ?? 0;
        // What a load balancer sees: every replica says not ready while PostgreSQL is gone.
        const bases = [...f.live.values()]
          .filter((r) => !r.name.startsWith("dispatcher"))
          .map((r) => ({ name: r.name, base: r.process.base }));
        const notReady = await Promise.all(
          bases.map(async ({ name, base }) => {
            const deadline = Date.now() + 10_000;
            while (Date.now() < deadline) {
              if ((await statusOf(base, "/readyz")) === 503) return null;
              await sleep(100);
            }
            return name;
          }),
        );
        const stayedReady = notReady.filter((n) => n !== null);
        if (stayedReady.length > 0)
          problems.push(`${stayedReady.join(", ")} did not answer /readyz 503 while PostgreSQL was gone`);
        const reloadMs = await pgbouncer.repoint("127.0.0.1", toStandby.port);
        w1.mark = now();
        // The API's LISTEN sessions on the new primary (through the session-mode entry).
        apiReplicas = f.apiNames().length;
        const deadline = Date.now() + 15_000;
        while (Date.now() < deadline) {
          const [row] = await watcher.pool
            .query<{ n: number }>(
              "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND datname = $2",
              [TOKEN_LISTEN_APPLICATION_NAME, t.databaseName],
            )
            .then(
              (r) => r.rows,
              () => [{ n: -1 }],
            );
          if (row && row.n >= apiReplicas) {
            listenFollowMs = now() - (w1.mark ?? 0);
            break;
          }
          await sleep(50);
        }
        // Readiness comes back by itself.
        const readyDeadline = Date.now() + 15_000;
        let readyMs: number | null = null;
        while (Date.now() < readyDeadline) {
          const statuses = await Promise.all(bases.map(({ base }) => statusOf(base, "/readyz")));
          if (statuses.every((s) => s === 200)) {
            readyMs = now() - (w1.mark ?? 0);
            break;
          }
          await sleep(100);
        }
        if (readyMs === null)
          problems.push("not every replica answered /readyz 200 within 15 s of the repoint");
        w1.notes.push(
          `postmaster ${pid} killed, standby promoted in ${promoteMs.toFixed(0)} ms, every replica's /readyz 503, PgBouncer repointed ${(((w1.mark ?? 0) - killedAt) / 1000).toFixed(1)} s after the kill (RELOAD ${reloadMs.toFixed(0)} ms)`,
          `LISTEN on the new primary ${listenFollowMs === null ? "never" : `${(listenFollowMs / 1000).toFixed(1)} s`} after the repoint`,
          `all ready again ${readyMs === null ? "never" : `${(readyMs / 1000).toFixed(1)} s`} after the repoint`,
        );
        return undefined;
      });

      // ---- 2. Redis: the queue slot's master killed, its replica takes over ----
      await at(TIMELINE.redisKill);
      const queueKey = `${DEFAULT_QUEUE_PREFIX}:webhook-deliveries`;
      const port = await t.redis.masterOf(queueKey);
      const w2 = open(`Redis master of the queue's slot (${port}) SIGKILLed, replica promoted`);
      await fault(w2.label, async () => {
        const killedAt = now();
        await t.redis.kill(port);
        await t.redis.waitHealthy(30_000);
        const promotedMs = now() - killedAt;
        const next = await t.redis.masterOf(queueKey);
        w2.notes.push(`replica ${next} serving the slot ${(promotedMs / 1000).toFixed(1)} s after the kill`);
        return undefined;
      });

      // ---- 3. Redis slow: every node answers 100 ms late for 10 s ----
      await at(TIMELINE.redisSlow);
      const w3 = open("Redis 100 ms late for 10 s");
      await fault(w3.label, async () => {
        for (const proxy of t.redis.proxies) proxy.setDelay(100);
        await sleep(10_000);
        for (const proxy of t.redis.proxies) proxy.setDelay(0);
        return undefined;
      });

      // ---- 4. PostgreSQL stalled 3 s ----
      await at(TIMELINE.postgresStall);
      const w4 = open("PostgreSQL stalled 3 s");
      await fault(w4.label, async () => {
        await toStandby.stall(3_000);
        return undefined;
      });
    })();

    let timelineError: unknown;
    await Promise.all([timeline.catch((error) => (timelineError = error)), at(TIMELINE.end)]);
    const end = await load.stop();
    if (current) current.to = now();
    log(
      `load done after ${end.loadSeconds.toFixed(1)} s: votes ${statusList(load.votes)}; checks ${statusList(load.checks)}; stats ${statusList(load.stats)}`,
    );
    if (timelineError) throw timelineError;

    // ---- tally ----
    const deliveries = await tallyDeliveries(
      t,
      load,
      end.loadEnd,
      faults,
      { deadlineMs: 90_000, finishBy: setupStarted + BUDGET_MS - 15_000 },
      log,
    );
    const db = createDb({ url: t.pooledUrl, poolMax: 1, connectionTimeoutMs: 10_000 });
    let logged: Set<string>;
    try {
      const { rows } = await db.pool.query<{ k: string }>(
        "SELECT bot_id || ':' || user_id AS k FROM vote_log",
      );
      logged = new Set(rows.map((r) => r.k));
    } finally {
      await db.close();
    }
    const undelivered = new Set(deliveries.undelivered);
    const missingFromLog = [...load.accepted.keys()].filter((k) => !logged.has(k));

    // Per fault: the votes answered 201 while it was on, lost from the log or undelivered.
    for (const w of windows) {
      const answered = [...w.statuses.values()].reduce((a, b) => a + b, 0);
      const inWindow = [...load.accepted].filter(
        ([, answeredAt]) => answeredAt >= w.from && answeredAt < w.to,
      );
      const lost = inWindow.filter(([k]) => !logged.has(k) || undelivered.has(k)).length;
      const duplicates = deliveries.duplicatesByPhase.get(w.label) ?? 0;
      const unanswered = [...w.unanswered].map(([k, n]) => `${k} ${n}`).join(", ") || "0";
      const first201 =
        w.mark === null
          ? "-"
          : w.first201AfterMarkMs === null
            ? "never"
            : `${(w.first201AfterMarkMs / 1000).toFixed(2)} s`;
      lines.push(
        `failover: ${w.label} (${((w.to - w.from) / 1000).toFixed(1)} s): answered ${answered} (${[
          ...w.statuses,
        ]
          .sort(([a], [b]) => a - b)
          .map(([s, n]) => `${s}: ${n}`)
          .join(
            ", ",
          )}), 5xx ${w.serverErrors}, unanswered ${unanswered}, repoint → first 201 ${first201}, votes 201 ${inWindow.length}, lost ${lost}, duplicates ${duplicates}, fail-open ${w.failOpen}, checks p99 ${p99(w.checkMs).toFixed(0)} ms${w.notes.length ? `; ${w.notes.join("; ")}` : ""}`,
      );
      if (w.withoutRetryAfter > 0)
        problems.push(`${w.label}: ${w.withoutRetryAfter} 5xx answers without Retry-After`);
      const timeouts = w.unanswered.get("timeout") ?? 0;
      if (timeouts > 0) problems.push(`${w.label}: ${timeouts} requests timed out (10 s)`);
    }
    const [w1, w2, w3, w4] = windows;
    if (w1 && w1.first201AfterMarkMs === null) problems.push("no vote was answered 201 after the repoint");
    else if (w1?.first201AfterMarkMs != null && w1.first201AfterMarkMs > FOLLOW_MS)
      problems.push(
        `the PostgreSQL outage lasted ${(w1.first201AfterMarkMs / 1000).toFixed(1)} s after the repoint (more than ${FOLLOW_MS / 1000} s)`,
      );
    if (listenFollowMs === null)
      problems.push(`the API's LISTEN connections (${apiReplicas}) never showed on the new primary`);
    else if (listenFollowMs > FOLLOW_MS)
      problems.push(
        `the API's LISTEN connections were on the new primary ${(listenFollowMs / 1000).toFixed(1)} s after the repoint (more than ${FOLLOW_MS / 1000} s)`,
      );
    if (w2 && w2.serverErrors > 0) problems.push(`${w2.label}: ${w2.serverErrors} answers were 5xx`);
    if (w3 && w3.serverErrors > 0) problems.push(`${w3.label}: ${w3.serverErrors} answers were 5xx`);
    if (w4 && w4.serverErrors > 0 && (w4.statuses.get(201) ?? 0) === 0)
      problems.push(`${w4.label}: no vote was answered 201 around the stall`);
    // Duplicates are by design (an answer later than the timeout is sent again) but bounded.
    if (deliveries.duplicates > deliveries.distinctDeliveries * 0.005)
      problems.push(
        `${deliveries.duplicates} duplicate deliveries of ${deliveries.distinctDeliveries} (not under 0.5 %)`,
      );
    if (missingFromLog.length > 0)
      problems.push(
        `${missingFromLog.length} votes answered 201 are missing from the new primary's vote_log (e.g. ${missingFromLog.slice(0, 3).join(", ")})`,
      );
    if (deliveries.undelivered.length > 0)
      problems.push(
        `${deliveries.undelivered.length} of ${deliveries.accepted} votes answered 201 were not delivered (e.g. ${deliveries.undelivered.slice(0, 3).join(", ")})`,
      );
    const exited = t.replicas.filter((r) => !r.process.alive()).map((r) => r.name);
    if (exited.length > 0)
      problems.push(`app processes exited: ${exited.join(", ")} (none may need a restart)`);
    lines.push(
      `failover: ${end.loadSeconds.toFixed(0)} s load; votes ${load.votes.sent} sent, ${deliveries.accepted} answered 201, ${deliveries.delivered} delivered, ${deliveries.duplicates} duplicates, ${missingFromLog.length} missing from the log; machine load ${end.loadAverage.map((l) => l.toFixed(1)).join(" → ")}; ${((Date.now() - started) / 1000).toFixed(0)} s in all`,
    );
  } catch (error) {
    if (error instanceof SetupError) {
      process.stdout.write(`failover: FAILED: ${error.message}\n`);
      problems.push(error.message);
    } else problems.push(`the suite could not run: ${(error as Error).stack ?? error}`);
  } finally {
    fleet?.close();
    await standbyDb?.close();
    if (topology && problems.length > 0) {
      const dir = mkdtempSync(join(tmpdir(), "botdir-failover-logs-"));
      topology.saveLogs(dir);
      writeFileSync(join(dir, "pgbouncer.log"), topology.pgbouncer?.log() ?? "");
      problems.push(`process logs: ${dir}`);
    }
    await topology?.destroy();
    await Promise.all(proxies.map((p) => p.close()));
    await pair?.stop();
  }
  for (const line of lines) process.stdout.write(`${line}\n`);
  const total = Date.now() - setupStarted;
  if (total > BUDGET_MS)
    problems.push(`the suite took ${(total / 1000).toFixed(0)} s (build excluded), more than 4 minutes`);
  if (problems.length === 0) {
    process.stdout.write("failover: ok\n");
    return 0;
  }
  process.stdout.write(
    `failover: FAILED (${problems.length}):\n${problems.map((p) => `  - ${p}`).join("\n")}\n`,
  );
  return 1;
}

process.exit(await main());
