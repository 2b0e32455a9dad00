/**
 * `BENCH_ONLY=soak pnpm bench`: the soak of issue 42 in short. The README's stack (`pnpm start`:
 * scripts/start.mjs, the three apps from source through tsx under this Node) takes votes for bots
 * with webhooks at an even BENCH_SOAK_VOTES_PER_S (400) and `GET /check` at BENCH_SOAK_CHECKS_PER_S
 * (800) for BENCH_SOAK_S seconds (120), then gets BENCH_SOAK_DRAIN_S (120) to deliver what is left.
 * Printed per round: votes answered, checks answered, deliveries received, the backlog (votes
 * recorded − delivered) at the end of the load and its growth, the drain's length, and CPU of each
 * process per delivery.
 *
 * BENCH_SOAK_BUILDS="<root>,<root>": checkouts (each with its node_modules) whose `pnpm start` is run
 * in turn, round after round (A B A B …, BENCH_SOAK_ROUNDS each, default 1); default: this one.
 * Each round has its own scratch database (migrated by that checkout's start) and private Redis,
 * so two builds never share a queue. BENCH_SOAK_PG_SAMPLE=1: what the database's backends run,
 * sampled, and its tables' scan counters; BENCH_SOAK_LOG=<prefix>: what `pnpm start` printed;
 * BENCH_SOAK_ENV="NAME=value,…": more variables for the apps; BENCH_SOAK_HISTORY=<n>: n past
 * delivered votes per bot with a webhook before `ANALYZE`.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createWriteStream, readFileSync } from "node:fs";
import { Agent, request as httpRequest } from "node:http";
import path from "node:path";
import { createSecretBox } from "@botdir/db";
import { withDatabase } from "@botdir/db/testing";
import pg from "pg";
import { insertTokenBots, percentile, seedDeliveryHistory, sleep } from "./pipeline.js";
import {
  cpuSeconds,
  cpuSecondsBetween,
  freePort,
  postgresCpu,
  ROOT,
  rssMb,
  startRedisServer,
  waitForHttp,
} from "./procs.js";
import { RECEIVER_ORIGINS, type Receiver, startReceiver } from "./receiver.js";

const BASE_DB = process.env.DATABASE_URL ?? "postgresql://postgres@127.0.0.1:5432/postgres";
const log = (line: string) => process.stdout.write(`[soak] ${line}\n`);

export interface SoakSettings {
  loadS: number;
  drainS: number;
  votesPerS: number;
  checksPerS: number;
  webhookBots: number;
  tokenBots: number;
}

export interface SoakRound {
  build: string;
  round: number;
  votes: { sent: number; answered2xx: number; failed: number; p99Ms: number };
  checks: { sent: number; answered2xx: number; other: number; failed: number; p99Ms: number };
  delivered: { duringLoad: number; total: number; recorded: number; all: boolean };
  backlog: { endOfLoad: number; growthPerS: number; samples: number[] };
  drainS: number | null;
  cpuS: Record<string, number>;
  cpuUsPerDelivery: Record<string, number>;
  /** BENCH_SOAK_PG_SAMPLE=1: the busiest tables' scan counters at the end of the load. */
  pgTables?: Record<string, unknown>[];
}

const settingsFromEnv = (): SoakSettings => ({
  loadS: Number(process.env.BENCH_SOAK_S ?? 120),
  drainS: Number(process.env.BENCH_SOAK_DRAIN_S ?? 120),
  votesPerS: Number(process.env.BENCH_SOAK_VOTES_PER_S ?? 400),
  checksPerS: Number(process.env.BENCH_SOAK_CHECKS_PER_S ?? 800),
  webhookBots: 2_000,
  tokenBots: 2_000,
});

/** The pids of a process's children (Linux /proc). */
function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").split(" ").filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** The command line of a process, its arguments joined by spaces. */
function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ");
  } catch {
    return "";
  }
}

/**
 * Requests at an even `rate` per second for `durationS` over keep-alive connections, without
 * waiting for answers; resolves when every answer is in, with the statuses and latencies.
 */
async function pacedRequests(
  url: string,
  method: "GET" | "POST",
  rate: number,
  durationS: number,
  connections: number,
  next: () => { path: string; headers?: Record<string, string>; body?: string },
) {
  const agent = new Agent({ keepAlive: true, maxSockets: connections });
  const { hostname, port } = new URL(url);
  const statuses = new Map<number, number>();
  const latencies: number[] = [];
  let failed = 0;
  const inFlight = new Set<Promise<void>>();
  const send = () => {
    const r = next();
    const t0 = performance.now();
    const done = new Promise<void>((resolve) => {
      const req = httpRequest(
        {
          agent,
          host: hostname,
          port,
          method,
          path: r.path,
          headers: {
            ...r.headers,
            ...(r.body
              ? { "content-type": "application/json", "content-length": Buffer.byteLength(r.body) }
              : {}),
          },
          timeout: 30_000,
        },
        (res) => {
          res.resume();
          res.on("end", () => {
            statuses.set(res.statusCode ?? 0, (statuses.get(res.statusCode ?? 0) ?? 0) + 1);
            latencies.push(performance.now() - t0);
            resolve();
          });
          res.on("error", () => {
            failed++;
            resolve();
          });
        },
      );
      req.on("timeout", () => req.destroy(new Error("timeout")));
      req.on("error", () => {
        failed++;
        resolve();
      });
      req.end(r.body);
    }).finally(() => inFlight.delete(done));
    inFlight.add(done);
  };
  const total = Math.round(rate * durationS);
  const start = performance.now();
  let sent = 0;
  while (sent < total) {
    const due = Math.min(total, Math.floor(((performance.now() - start) * rate) / 1000) + 1);
    for (; sent < due; sent++) send();
    await sleep(1);
  }
  await Promise.all(inFlight);
  agent.destroy();
  const ok = [...statuses].filter(([s]) => s >= 200 && s < 300).reduce((a, [, n]) => a + n, 0);
  return { sent, ok, other: latencies.length - ok, failed, p99: Math.round(percentile(latencies, 99)) };
}

async function seed(
  url: string,
  receiver: Receiver,
  hookPath: string,
  encryptionKey: string,
  settings: SoakSettings,
): Promise<{ webhookBots: string[]; tokens: { id: string; token: string }[] }> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const box = createSecretBox(Buffer.from(encryptionKey, "hex"));
    const webhookBots = Array.from(
      { length: settings.webhookBots },
      (_, i) => `${500000000000000000n + BigInt(i)}`,
    );
    await client.query(
      `INSERT INTO bots (id, status, approved_at, webhook_url, webhook_secret_encrypted)
       SELECT id, 'approved', now(), url, secret FROM unnest($1::text[], $2::text[], $3::text[]) AS t(id, url, secret)`,
      [
        webhookBots,
        webhookBots.map((_, i) => receiver.url(hookPath, i)),
        webhookBots.map((id) => box.encrypt(`whsec_soak_${id}`)),
      ],
    );
    const tokens = await insertTokenBots(
      client,
      Array.from({ length: settings.tokenBots }, (_, i) => `${600000000000000000n + BigInt(i)}`),
    );
    // One voter with an open window per token bot: /check answers from a row.
    await client.query(
      `WITH v AS (
         INSERT INTO vote_log (bot_id, user_id, voted_at)
         SELECT id, '700000000000000001', now() - interval '1 minute' FROM unnest($1::text[]) AS t(id)
         RETURNING id, bot_id, user_id, voted_at)
       INSERT INTO vote_windows (bot_id, user_id, voted_at, vote_id) SELECT bot_id, user_id, voted_at, id FROM v`,
      [tokens.map((b) => b.id)],
    );
    // BENCH_SOAK_HISTORY=<n>: n past delivered votes per bot with a webhook before `ANALYZE` (a live
    // directory's deliveries; default none, as a fresh `pnpm start`).
    const history = Number(process.env.BENCH_SOAK_HISTORY ?? 0);
    if (history > 0) await seedDeliveryHistory(client, webhookBots, history);
    await client.query("ANALYZE");
    return { webhookBots, tokens };
  } finally {
    await client.end();
  }
}

/** One round: `root`'s `pnpm start` against a scratch database and a private Redis of its own. */
async function soakRound(
  root: string,
  round: number,
  receiver: Receiver,
  settings: SoakSettings,
): Promise<SoakRound> {
  const build = path.relative(ROOT, root) || ".";
  const redis = await startRedisServer();
  const dbName = `botdir_soak_${Date.now().toString(36)}_${round}`;
  const dbUrl = withDatabase(BASE_DB, dbName);
  const admin = new pg.Client({ connectionString: withDatabase(BASE_DB, "postgres") });
  await admin.connect();
  await admin.query(`CREATE DATABASE "${dbName}"`);
  let start: ChildProcess | undefined;
  try {
    const [apiPort, metricsPort, ingestPort, dispatcherPort] = await Promise.all([
      freePort(),
      freePort(),
      freePort(),
      freePort(),
    ]);
    const encryptionKey = randomBytes(32).toString("hex");
    const internalKey = randomBytes(24).toString("base64url");
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? "",
      HOME: process.env.HOME ?? "/root",
      DATABASE_URL: dbUrl,
      REDIS_URL: redis.url,
      INTERNAL_API_KEY: internalKey,
      SECRET_ENCRYPTION_KEY: encryptionKey,
      WEBHOOK_ALLOW_PRIVATE_TARGETS: "true",
      API_PORT: String(apiPort),
      METRICS_PORT: String(metricsPort),
      INGEST_PORT: String(ingestPort),
      DISPATCHER_PORT: String(dispatcherPort),
      ...(process.env.BENCH_SOAK_ENV
        ? Object.fromEntries(
            // BENCH_SOAK_ENV="NAME=value,NAME=value": more variables for the apps (a value may hold "=").
            process.env.BENCH_SOAK_ENV.split(",").map((kv) => [
              kv.slice(0, kv.indexOf("=")),
              kv.slice(kv.indexOf("=") + 1),
            ]),
          )
        : {}),
    };
    // The build's own migrations, then the seed (so its statistics are there when the apps plan
    // their statements and the API loads its token set); `pnpm start` finds nothing to migrate.
    execFileSync(process.execPath, ["--import", "tsx", "packages/db/src/migrate-cli.ts"], {
      cwd: root,
      env,
      stdio: ["ignore", "ignore", "inherit"],
    });
    const hookPath = `/soak-${round}`;
    const seeded = await seed(dbUrl, receiver, hookPath, encryptionKey, settings);
    // `pnpm start`: generates the Prisma client, migrates, runs the apps (scripts/start.mjs).
    start = spawn(process.execPath, ["scripts/start.mjs"], {
      cwd: root,
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let tail = "";
    const keep = (c: Buffer) => {
      tail = (tail + c).slice(-4000);
    };
    // BENCH_SOAK_LOG=<file prefix>: everything `pnpm start` printed, one file per round.
    const logFile = process.env.BENCH_SOAK_LOG
      ? createWriteStream(`${process.env.BENCH_SOAK_LOG}-${round}.log`)
      : null;
    for (const stream of [start.stdout, start.stderr]) {
      stream?.on("data", keep);
      if (logFile) stream?.pipe(logFile, { end: false });
    }
    start.on("exit", (code, signal) => {
      if (code) log(`${build}: pnpm start exited ${code ?? signal}: ${tail}`);
    });
    const apiUrl = `http://127.0.0.1:${apiPort}`;
    const ingestUrl = `http://127.0.0.1:${ingestPort}`;
    await Promise.all([
      waitForHttp(`${apiUrl}/api/health`, 300_000),
      waitForHttp(`${ingestUrl}/health`, 300_000),
      waitForHttp(`http://127.0.0.1:${dispatcherPort}/health`, 300_000),
    ]);
    const apps: Record<string, number> = {};
    for (const pid of childrenOf(start.pid as number)) {
      const cmd = cmdline(pid);
      for (const name of ["api", "vote-ingest", "webhook-dispatcher"]) {
        if (cmd.includes(`apps/${name}/src/main.ts`)) apps[name] = pid;
      }
    }
    const cpuOf = () => ({
      ...Object.fromEntries(Object.entries(apps).map(([name, pid]) => [name, cpuSeconds(pid)])),
      start: cpuSeconds(start?.pid),
      redis: cpuSeconds(redis.pid()),
      bench: cpuSeconds(process.pid),
    });
    const pgBefore = postgresCpu(dbName);
    const before = cpuOf();
    const received = () => receiver.received(hookPath);
    let voter = 0;
    let checker = 0;
    const t0 = Date.now();
    const backlog: number[] = [];
    let acked = 0;
    const votes = pacedRequests(ingestUrl, "POST", settings.votesPerS, settings.loadS, 64, () => {
      const n = voter++;
      return {
        path: "/internal/v1/votes",
        headers: { authorization: internalKey },
        body: `{"bot_id":"${seeded.webhookBots[n % seeded.webhookBots.length]}","user_id":"${800000000000000000n + BigInt(n)}"}`,
      };
    });
    const checks = pacedRequests(apiUrl, "GET", settings.checksPerS, settings.loadS, 64, () => {
      const bot = seeded.tokens[checker++ % seeded.tokens.length] as { id: string; token: string };
      return {
        path: `/api/v1/bots/${bot.id}/check?userId=700000000000000001`,
        headers: { authorization: bot.token },
      };
    });
    let loading = true;
    const sampler = (async () => {
      while (loading) {
        await sleep(10_000);
        if (!loading) break;
        // Votes sent so far − delivered: what waits in the outbox and the queue (and in flight).
        acked = voter;
        backlog.push(acked - received());
        log(
          `${build} round ${round}: ${Math.round((Date.now() - t0) / 1000)} s, ${voter} votes sent, ${received()} delivered, backlog ${acked - received()}; ` +
            `RSS MB ${Object.entries(apps)
              .map(([name, pid]) => `${name} ${rssMb(pid)}`)
              .join(", ")}; ` +
            `CPU s ${Object.entries(cpuOf())
              .map(
                ([name, s]) =>
                  `${name} ${Math.round((s - (before[name as keyof typeof before] ?? 0)) * 10) / 10}`,
              )
              .join(", ")}`,
        );
      }
    })();
    // BENCH_SOAK_PG_SAMPLE=1: what the database's backends are running, sampled every 100 ms.
    const pgSamples = new Map<string, number>();
    const pgSampling = process.env.BENCH_SOAK_PG_SAMPLE === "1";
    let pgTables: Record<string, unknown>[] | undefined;
    const sampling = (async () => {
      if (!pgSampling) return;
      const client = new pg.Client({ connectionString: dbUrl });
      await client.connect();
      try {
        while (loading) {
          const { rows } = await client.query<{ q: string }>(
            `SELECT coalesce(wait_event_type, 'cpu') || ' ' || regexp_replace(left(query, 100), '\\s+', ' ', 'g') AS q
               FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()`,
          );
          for (const { q } of rows) pgSamples.set(q, (pgSamples.get(q) ?? 0) + 1);
          await sleep(100);
        }
      } finally {
        await client.end();
      }
    })();
    const [v, c] = await Promise.all([votes, checks]);
    loading = false;
    await sampler;
    await sampling;
    if (pgSampling) {
      for (const [q, n] of [...pgSamples].sort((a, b) => b[1] - a[1]).slice(0, 15)) log(`  pg ${n} × ${q}`);
      const client = new pg.Client({ connectionString: dbUrl });
      await client.connect();
      const { rows } = await client.query(
        `SELECT relname, seq_scan, seq_tup_read, idx_scan, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables ORDER BY seq_tup_read DESC LIMIT 8`,
      );
      for (const r of rows) log(`  table ${JSON.stringify(r)}`);
      pgTables = rows;
      await client.end();
    }
    const duringLoad = received();
    const recorded = Number(
      (
        await admin.query(`SELECT 1`).then(async () => {
          const client = new pg.Client({ connectionString: dbUrl });
          await client.connect();
          try {
            return await client.query<{ n: string }>(
              "SELECT count(*)::text AS n FROM webhook_deliveries WHERE created_at > now() - interval '1 hour'",
            );
          } finally {
            await client.end();
          }
        })
      ).rows[0]?.n ?? 0,
    );
    const endOfLoad = recorded - duringLoad;
    const drainStart = Date.now();
    let drainS: number | null = null;
    while (Date.now() - drainStart < settings.drainS * 1000) {
      if (received() >= recorded) {
        drainS = Math.round((Date.now() - drainStart) / 100) / 10;
        break;
      }
      await sleep(250);
    }
    const total = received();
    const after = cpuOf();
    const cpuS: Record<string, number> = {};
    for (const [name, s] of Object.entries(after))
      cpuS[name] = Math.round((s - (before[name as keyof typeof before] ?? 0)) * 100) / 100;
    cpuS.postgres = Math.round(cpuSecondsBetween(pgBefore, postgresCpu(dbName)) * 100) / 100;
    const cpuUsPerDelivery = Object.fromEntries(
      Object.entries(cpuS).map(([name, s]) => [name, Math.round((s * 1e6) / Math.max(1, total))]),
    );
    const result: SoakRound = {
      build,
      round,
      votes: { sent: v.sent, answered2xx: v.ok, failed: v.failed + v.other, p99Ms: v.p99 },
      checks: { sent: c.sent, answered2xx: c.ok, other: c.other, failed: c.failed, p99Ms: c.p99 },
      delivered: { duringLoad, total, recorded, all: total >= recorded },
      backlog: {
        endOfLoad,
        growthPerS: Math.round((endOfLoad / settings.loadS) * 10) / 10,
        samples: backlog,
      },
      drainS,
      cpuS,
      cpuUsPerDelivery,
      ...(pgTables ? { pgTables } : {}),
    };
    log(
      `${build} round ${round}: votes ${v.ok}/${v.sent} answered (p99 ${v.p99} ms), checks ${c.ok}/${c.sent} (p99 ${c.p99} ms); ` +
        `delivered ${total} of ${recorded} (${duringLoad} during the load), backlog at the end of the load ${endOfLoad} ` +
        `(+${result.backlog.growthPerS}/s), drained ${drainS === null ? `NOT within ${settings.drainS} s` : `in ${drainS} s`}`,
    );
    log(
      `${build} round ${round}: CPU s ${JSON.stringify(cpuS)}; µs per delivery ${JSON.stringify(cpuUsPerDelivery)}`,
    );
    return result;
  } finally {
    if (start && start.exitCode === null) {
      const exited = new Promise((r) => start?.once("exit", r));
      start.kill("SIGTERM");
      const timer = setTimeout(() => start?.kill("SIGKILL"), 30_000);
      await exited;
      clearTimeout(timer);
    }
    await redis.stop();
    await admin.query(`DROP DATABASE IF EXISTS "${dbName}" WITH (FORCE)`).catch(() => {});
    await admin.end();
  }
}

export async function soak(): Promise<SoakRound[]> {
  const settings = settingsFromEnv();
  const roots = (process.env.BENCH_SOAK_BUILDS ?? ROOT)
    .split(",")
    .filter(Boolean)
    .map((r) => path.resolve(ROOT, r));
  const rounds = Number(process.env.BENCH_SOAK_ROUNDS ?? 1);
  log(
    `${settings.votesPerS} votes/s to ${settings.webhookBots} bots with webhooks (${RECEIVER_ORIGINS} origins) + ` +
      `${settings.checksPerS} GET /check per s for ${settings.loadS} s, then ${settings.drainS} s to deliver; ` +
      `pnpm start of ${roots.map((r) => path.relative(ROOT, r) || ".").join(", ")}, ${rounds} round(s) each, alternating`,
  );
  const receiver = await startReceiver();
  const results: SoakRound[] = [];
  try {
    let n = 0;
    for (let r = 0; r < rounds; r++) {
      for (const root of roots) results.push(await soakRound(root, n++, receiver, settings));
    }
  } finally {
    await receiver.close();
  }
  return results;
}
