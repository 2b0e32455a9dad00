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
import { createDb } from "@botdir/db";
import { withDatabase } from "@botdir/db/testing";
import {
  type FaultProxy,
  type PrivatePgBouncer,
  startPgBouncer,
  startRedisCluster,
  startRedisServer,
} from "@botdir/test-stores";
import { type AppName, type AppProcess, freshKeys, REPO_ROOT, startApp } from "../processes.js";
import { type Receiver, startReceiver } from "../receivers.js";
import { appEnv } from "../stack.js";

const run = promisify(execFile);

/** The Redis the apps use: a Cluster's masters, or one server (ports[0]). */
export interface RedisTopology {
  ports: number[];
  /** REDIS_CLUSTER_NODES (cluster) or REDIS_URL (one server). */
  env: Record<string, string>;
  /** Port of the master that serves `key`'s slot. */
  masterOf(key: string): Promise<number>;
  /** SIGKILL of the server on `port`. */
  kill(port: number): Promise<void>;
  /** Starts it again (empty; a master with its cluster config) and waits until it serves. */
  restart(port: number): Promise<void>;
  /** Resolves once every slot is served again (a replica promoted, a master back). */
  waitHealthy(timeoutMs?: number): Promise<void>;
  /** The fault proxies in front of the nodes (a proxied cluster), else none. */
  proxies: FaultProxy[];
  stop(): Promise<void>;
}

async function clusterTopology(options: {
  replicas?: number;
  proxied?: boolean;
  requireFullCoverage?: boolean;
}): Promise<RedisTopology> {
  const cluster = await startRedisCluster({ masters: 3, ...options });
  const indexOf = (port: number) => cluster.ports.indexOf(port);
  return {
    ports: cluster.ports,
    proxies: cluster.proxies,
    waitHealthy: (timeoutMs) => cluster.waitHealthy(timeoutMs),
    env: { REDIS_CLUSTER_NODES: cluster.nodes },
    masterOf: (key) => cluster.masterOf(key),
    kill: (port) => cluster.kill(indexOf(port)),
    async restart(port) {
      await cluster.restart(indexOf(port));
      await cluster.waitHealthy(30_000);
    },
    stop: () => cluster.stop(),
  };
}

async function singleTopology(): Promise<RedisTopology> {
  const redis = await startRedisServer();
  return {
    ports: [redis.port],
    proxies: [],
    waitHealthy: async () => {},
    env: { REDIS_URL: redis.url },
    masterOf: async () => redis.port,
    kill: () => redis.kill(),
    restart: () => redis.restart(),
    stop: () => redis.stop(),
  };
}

export interface TopologyOptions {
  /**
   * App replicas listen on fixed ports from here up (one new port per start), PgBouncer on
   * portBase - 10: a free port found then released can be taken by another process before the
   * app binds it, on a machine running other suites.
   */
  portBase: number;
  /** PgBouncer + Redis Cluster (true) or PostgreSQL directly + one Redis (false). */
  distributed: boolean;
  /** postgresql:// URL of the PostgreSQL server (any database). */
  serverUrl: string;
  /**
   * What PgBouncer points at (any database), when not serverUrl: a fault proxy in front of it, so
   * that the link can be slowed, stalled or the pooler repointed elsewhere.
   */
  poolerTargetUrl?: string;
  /**
   * DATABASE_DIRECT_URL through a session-mode entry of the same PgBouncer
   * (`<database>_session`) instead of PostgreSQL itself: docs/scaling.md's failover setup, where
   * one RELOAD repoints both.
   */
  directThroughPooler?: boolean;
  /**
   * Replicas per Redis master, fault proxies in front of the nodes, `cluster-require-full-coverage`
   * (distributed only).
   */
  redis?: { replicas?: number; proxied?: boolean; requireFullCoverage?: boolean };
  /** PgBouncer with docs/scaling.md's failover settings (default true; false: PgBouncer's defaults). */
  poolerFailoverSettings?: boolean;
  /** Extra environment of every app (over the suite's). */
  env?: Record<string, string>;
  log(line: string): void;
}

export interface Topology {
  redis: RedisTopology;
  pgbouncer: PrivatePgBouncer | undefined;
  receiver: Receiver;
  keys: ReturnType<typeof freshKeys>;
  databaseName: string;
  /** The apps' DATABASE_URL (through PgBouncer when there is one). */
  pooledUrl: string;
  /** Attempts PostgreSQL recorded for `deliveryIds`: per delivery, each attempt's error kind (null: success). */
  recordedAttempts(deliveryIds: string[]): Promise<Map<string, (string | null)[]>>;
  /** Starts one more replica of `app`, named e.g. `api-3`. */
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
  const db = createDb({ url: withDatabase(serverUrl, "postgres"), poolMax: 1, connectionTimeoutMs: 10_000 });
  try {
    await db.pool.query(sql);
  } finally {
    await db.close();
  }
}

export async function startTopology(options: TopologyOptions): Promise<Topology> {
  const { log } = options;
  let nextPort = options.portBase;
  const cleanups: (() => Promise<void>)[] = [];
  const replicas: Replica[] = [];
  const counters = new Map<AppName, number>();
  const destroy = async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
    cleanups.length = 0;
  };

  try {
    const redis = options.distributed ? await clusterTopology(options.redis ?? {}) : await singleTopology();
    cleanups.push(() => redis.stop());
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

    let pgbouncer: PrivatePgBouncer | undefined;
    if (options.distributed) {
      // Enough server connections for 7 replicas' pools to wait little, far fewer than their sum.
      const started = await startPgBouncer({
        targetUrl: options.poolerTargetUrl ?? options.serverUrl,
        port: options.portBase - 10,
        poolSize: 20,
        sessionDatabases: options.directThroughPooler ? { [`${databaseName}_session`]: databaseName } : {},
        failoverSettings: options.poolerFailoverSettings ?? true,
      });
      pgbouncer = started;
      cleanups.push(() => started.stop());
      log(`pgbouncer (transaction pooling) on ${started.port}`);
    }
    const pooledUrl = pgbouncer ? pgbouncer.url(databaseName) : directUrl;
    const appDirectUrl =
      pgbouncer && options.directThroughPooler ? pgbouncer.url(`${databaseName}_session`) : directUrl;

    const receiver = await startReceiver();
    cleanups.push(() => receiver.close());

    const keys = freshKeys();
    const env = appEnv(
      // In the distributed setup REDIS_URL names a cluster node too: an app that ignored
      // REDIS_CLUSTER_NODES would get MOVED errors instead of writing to some other Redis.
      { databaseUrl: pooledUrl, redisUrl: `redis://127.0.0.1:${redis.ports[0]}`, keys },
      {
        ...redis.env,
        DATABASE_DIRECT_URL: appDirectUrl,
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
        // The spec's 10 s: the receiver shares a busy machine, and an answer later than the
        // timeout is a delivery the dispatcher must send again (a duplicate by design).
        WEBHOOK_TIMEOUT_MS: "10000",
        DB_POOL_MAX: "8",
        // Two API replicas (three for a moment in a rolling restart), as the manifests: a request
        // the limiter counted locally says so with its share (RateLimit-Limit 300 for /check).
        API_REPLICAS: "2",
        // The balancer polls /readyz every 200 ms; the drain leaves room for its own event loop
        // falling seconds behind on a busy machine (a load balancer's endpoint update lags too).
        SHUTDOWN_DRAIN_MS: "5000",
        ...options.env,
      },
    );

    const topology: Topology = {
      redis,
      pgbouncer,
      receiver,
      keys,
      databaseName,
      pooledUrl,
      replicas,
      async recordedAttempts(deliveryIds) {
        // Through the pooler when there is one: it follows a failover, the first primary may not.
        const db = createDb({ url: pooledUrl, poolMax: 1, connectionTimeoutMs: 10_000 });
        try {
          const { rows } = await db.pool.query<{ id: string; kind: string | null }>(
            `SELECT delivery_id AS id, error_kind AS kind FROM webhook_attempts
              WHERE delivery_id = ANY($1::uuid[]) ORDER BY delivery_id, attempted_at`,
            [deliveryIds],
          );
          const attempts = new Map<string, (string | null)[]>();
          for (const r of rows) attempts.set(r.id, [...(attempts.get(r.id) ?? []), r.kind]);
          return attempts;
        } finally {
          await db.close();
        }
      },
      async start(app) {
        const n = (counters.get(app) ?? 0) + 1;
        counters.set(app, n);
        const proc = await startApp(app, env, { dist: true, port: nextPort++ });
        const replica = { name: `${SHORT[app]}-${n}`, process: proc };
        replicas.push(replica);
        return replica;
      },
      saveLogs(dir) {
        mkdirSync(dir, { recursive: true });
        for (const r of replicas) writeFileSync(join(dir, `${r.name}.log`), r.process.output());
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
