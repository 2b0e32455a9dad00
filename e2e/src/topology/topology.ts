/**
 * The distributed deployment the topology suite runs: a Redis Cluster (or one Redis), PgBouncer in
 * transaction mode in front of the local PostgreSQL (or PostgreSQL directly), a database of its
 * own migrated directly, a webhook receiver, and replicas of the three apps started from their
 * dist/ builds on fixed ports. `destroy()` stops everything it started, whatever state it is in.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { withDatabase } from "@botdir/db/testing";
import { type AppName, type AppProcess, freshKeys, REPO_ROOT, startApp } from "../processes.js";
import { type Receiver, startReceiver } from "../receivers.js";
import { appEnv } from "../stack.js";
import type { Binaries } from "./binaries.js";
import { type PgBouncer, startPgBouncer } from "./pgbouncer.js";
import { type RedisTopology, startRedisCluster, startSingleRedis } from "./redis-cluster.js";

const run = promisify(execFile);

export interface TopologyOptions {
  /** PgBouncer + Redis Cluster (true) or PostgreSQL directly + one Redis (false). */
  distributed: boolean;
  /** First port of the suite's range: Redis at +0..+3 (bus +100..), PgBouncer +10, apps from +20. */
  portBase: number;
  /** postgresql:// URL of the PostgreSQL server (any database). */
  serverUrl: string;
  binaries: Binaries;
  log(line: string): void;
}

export interface Topology {
  redis: RedisTopology;
  pgbouncer: PgBouncer | undefined;
  receiver: Receiver;
  keys: ReturnType<typeof freshKeys>;
  databaseName: string;
  /** Starts one more replica of `app` (next fixed port), named e.g. `api-3`. */
  start(app: AppName): Promise<Replica>;
  replicas: Replica[];
  /** Writes every process's output under `dir`. */
  saveLogs(dir: string): void;
  destroy(): Promise<void>;
}

export interface Replica {
  name: string;
  process: AppProcess;
}

const SHORT: Record<AppName, string> = {
  api: "api",
  "vote-ingest": "ingest",
  "webhook-dispatcher": "dispatcher",
};

async function adminQuery(serverUrl: string, sql: string): Promise<void> {
  await run("psql", [withDatabase(serverUrl, "postgres"), "-v", "ON_ERROR_STOP=1", "-qAtc", sql], {
    timeout: 60_000,
  });
}

export async function startTopology(options: TopologyOptions): Promise<Topology> {
  const { binaries, portBase, log } = options;
  const cleanups: (() => Promise<void>)[] = [];
  const replicas: Replica[] = [];
  const counters = new Map<AppName, number>();
  let nextPort = portBase + 20;
  const destroy = async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
    cleanups.length = 0;
  };

  try {
    const redis = options.distributed
      ? await startRedisCluster(binaries, [portBase, portBase + 1, portBase + 2])
      : await startSingleRedis(binaries, portBase + 3);
    cleanups.push(() => redis.destroy());
    log(options.distributed ? `redis cluster on ${redis.ports.join(", ")}` : `redis on ${redis.ports[0]}`);

    const databaseName = `botdir_topology_${randomBytes(4).toString("hex")}`;
    await adminQuery(options.serverUrl, `CREATE DATABASE "${databaseName}"`);
    cleanups.push(() =>
      adminQuery(options.serverUrl, `DROP DATABASE IF EXISTS "${databaseName}" WITH (FORCE)`),
    );
    const directUrl = withDatabase(options.serverUrl, databaseName);
    // The migration runner the migrate image runs, straight at PostgreSQL.
    await run(process.execPath, ["dist/migrate.js"], {
      cwd: join(REPO_ROOT, "packages/db"),
      env: { ...process.env, DATABASE_URL: directUrl, NODE_OPTIONS: "" },
      timeout: 120_000,
    });

    let pgbouncer: PgBouncer | undefined;
    if (options.distributed) {
      const server = new URL(options.serverUrl);
      const started = await startPgBouncer(binaries, {
        port: portBase + 10,
        serverHost: server.hostname,
        serverPort: Number(server.port || 5432),
        user: decodeURIComponent(server.username || "postgres"),
        maxClientConn: 400,
        defaultPoolSize: 20,
      });
      pgbouncer = started;
      cleanups.push(() => started.stop());
      log(`pgbouncer (transaction pooling) on ${started.port}`);
    }
    const pooledUrl = pgbouncer ? pgbouncer.url(databaseName) : directUrl;

    const receiver = await startReceiver();
    cleanups.push(() => receiver.close());

    const keys = freshKeys();
    const env = appEnv(
      // In the distributed setup REDIS_URL names a cluster node too: an app that ignored
      // REDIS_CLUSTER_NODES would get MOVED errors instead of writing to some other Redis.
      { databaseUrl: pooledUrl, redisUrl: `redis://127.0.0.1:${redis.ports[0]}`, keys },
      {
        ...redis.env,
        DATABASE_DIRECT_URL: directUrl,
        NODE_ENV: "production",
        LOG_LEVEL: "warn",
        // Longer than the fault tests' 1 s lock: a loaded 2-core machine must not take a busy
        // replica's jobs for stalled ones (each would be a duplicate delivery). A killed
        // dispatcher's jobs are taken over within lock + stalled interval.
        DISPATCHER_LOCK_DURATION_MS: "10000",
        DISPATCHER_STALLED_INTERVAL_MS: "5000",
        DISPATCHER_CONCURRENCY: "50",
        OUTBOX_RELAY_INTERVAL_MS: "500",
        // Deliveries whose job was lost (the queue's Redis master came back empty) are handed off
        // again after this.
        OUTBOX_STALE_MS: "20000",
        WEBHOOK_RETRY_DELAYS_MS: "200,500,1000,2000",
        DB_POOL_MAX: "8",
        // The balancer polls /readyz every 200 ms: a draining API is out of rotation well before
        // it stops listening.
        SHUTDOWN_DRAIN_MS: "2000",
      },
    );

    const topology: Topology = {
      redis,
      pgbouncer,
      receiver,
      keys,
      databaseName,
      replicas,
      async start(app) {
        const n = (counters.get(app) ?? 0) + 1;
        counters.set(app, n);
        const port = nextPort++;
        const proc = await startApp(app, env, { dist: true, port });
        const replica = { name: `${SHORT[app]}-${n}`, process: proc };
        replicas.push(replica);
        return replica;
      },
      saveLogs(dir) {
        mkdirSync(dir, { recursive: true });
        for (const r of replicas) writeFileSync(join(dir, `${r.name}.log`), r.process.output());
        for (const [name, text] of Object.entries(redis.logs()))
          writeFileSync(join(dir, `${name}.log`), text);
        if (pgbouncer) {
          writeFileSync(join(dir, "pgbouncer.log"), pgbouncer.output());
          writeFileSync(join(dir, "pgbouncer.ini"), pgbouncer.ini);
        }
      },
      destroy,
    };
    cleanups.push(async () => {
      await Promise.all(replicas.map((r) => r.process.kill()));
    });
    return topology;
  } catch (error) {
    await destroy();
    throw error;
  }
}
