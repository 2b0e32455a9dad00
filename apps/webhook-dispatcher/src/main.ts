import { createDb, createSecretBox } from "@botdir/db";
import { QUEUES } from "@botdir/schema";
import {
  connectionsOf,
  createRedis,
  keyRing,
  loggerOptions,
  serveOrExit,
  startTelemetry,
  systemClock,
} from "@botdir/service-kit";
import { Queue } from "bullmq";
import { pino } from "pino";
import { createHttpApp } from "./app.js";
import { warmUp } from "./deliveries.js";
import { loadEnv } from "./env.js";
import { createDispatcherMetrics } from "./metrics.js";
import { createRetentionMetrics, firstRetentionDelayMs, scheduleRetention } from "./retention.js";
import { createDispatcherWorker } from "./worker.js";

const env = loadEnv();
// First: every span (and every log line's trace_id) needs the provider and the context manager.
const telemetry = startTelemetry(env);
const logger = pino(loggerOptions("webhook-dispatcher", env.LOG_LEVEL, { nodeEnv: env.NODE_ENV }));
// One line: whether spans are exported, where to (no credentials) and with which sampler.
logger.info(telemetry.startLine.fields, telemetry.startLine.msg);
// Failed exports and dropped spans: a warning line at most once a minute of each kind.
telemetry.reportProblems((fields, msg) => logger.warn(fields, msg));
const connections = connectionsOf(env, logger);
const db = createDb(connections.database);
// BullMQ needs maxRetriesPerRequest: null on worker connections; auto-pipelining stays off so
// blocking commands and Lua scripts are not batched behind each other.
const redis = createRedis(connections.redis, "worker");
// The queue-depth gauge reads job counts on a fail-fast connection of its own, so a scrape while
// Redis is down answers at once instead of waiting in the worker connection's offline queue.
const metricsRedis = createRedis(connections.redis, "fail-fast");
const countsQueue = new Queue(QUEUES.webhookDeliveries, {
  connection: metricsRedis,
  prefix: env.QUEUE_PREFIX,
  skipWaitingForReady: true,
  skipVersionCheck: true,
});
countsQueue.on("error", () => {});
const metrics = createDispatcherMetrics({ queue: countsQueue, processMetrics: true });

// Connect the pool and prepare the hot statements before the first job arrives.
await warmUp(db, env.DB_POOL_MAX);
const worker = createDispatcherWorker(
  { db, redis, secrets: createSecretBox(keyRing(env)), clock: systemClock, logger, metrics },
  {
    queuePrefix: env.QUEUE_PREFIX,
    concurrency: env.DISPATCHER_CONCURRENCY,
    timeoutMs: env.WEBHOOK_TIMEOUT_MS,
    retryDelays: env.WEBHOOK_RETRY_DELAYS_MS,
    allowPrivateTargets: env.WEBHOOK_ALLOW_PRIVATE_TARGETS,
    lockDurationMs: env.DISPATCHER_LOCK_DURATION_MS,
    stalledIntervalMs: env.DISPATCHER_STALLED_INTERVAL_MS,
    dbBatchMax: env.DISPATCHER_DB_BATCH_MAX,
    dbBatchInFlight: env.DISPATCHER_DB_BATCH_IN_FLIGHT,
    deadEndpoints: {
      afterMs: env.WEBHOOK_DISABLE_AFTER_MS,
      minDeliveries: env.WEBHOOK_DISABLE_MIN_DELIVERIES,
    },
    ...(env.WEBHOOK_DNS_TIMEOUT_MS === undefined ? {} : { dnsTimeoutMs: env.WEBHOOK_DNS_TIMEOUT_MS }),
    ...(env.WEBHOOK_DNS_SERVERS ? { dnsServers: env.WEBHOOK_DNS_SERVERS } : {}),
    maxInFlightPerWebhook: env.DISPATCHER_MAX_IN_FLIGHT_PER_WEBHOOK,
    maxInFlightPerOrigin: env.DISPATCHER_MAX_IN_FLIGHT_PER_ORIGIN,
    slowAttemptMs: env.DISPATCHER_SLOW_ATTEMPT_MS,
  },
);
if (env.WEBHOOK_ALLOW_PRIVATE_TARGETS) {
  logger.warn({}, "WEBHOOK_ALLOW_PRIVATE_TARGETS is on: webhooks may reach http and private addresses");
}

// Delivery retention: every replica schedules it, the advisory lock lets one run it at a time.
const retention =
  env.WEBHOOK_RETENTION_INTERVAL_S > 0
    ? scheduleRetention(
        { db, clock: systemClock, logger, metrics: createRetentionMetrics(metrics.registry) },
        {
          retentionDays: env.WEBHOOK_RETENTION_DAYS,
          batchSize: env.WEBHOOK_RETENTION_BATCH,
          pauseMs: 20,
          intervalMs: env.WEBHOOK_RETENTION_INTERVAL_S * 1000,
          // Spread the replicas' first tries over a minute after start (an interval when shorter).
          firstDelayMs: firstRetentionDelayMs(env.WEBHOOK_RETENTION_INTERVAL_S * 1000, Math.random()),
        },
      )
    : undefined;

// /readyz needs PostgreSQL and Redis: without Redis a dispatcher has no jobs to take.
const service = await serveOrExit({
  logger,
  app: createHttpApp({ db, redis, logger, metrics }),
  port: env.DISPATCHER_PORT,
  portVariable: "DISPATCHER_PORT",
  timeouts: connections.httpTimeouts,
  readiness: { postgres: () => db.pool.query("SELECT 1"), redis: () => metricsRedis.ping() },
  metrics: metrics.registry,
});
logger.info(
  { port: env.DISPATCHER_PORT, concurrency: env.DISPATCHER_CONCURRENCY, prefix: env.QUEUE_PREFIX },
  "webhook-dispatcher listening",
);

// worker.close() takes no new jobs and waits for the attempts in flight (each ends within the
// HTTP timeout); anything still running at the deadline is taken over by another replica once its
// job lock and its claim in PostgreSQL expire. No Service routes traffic to a dispatcher, so the
// drain only covers scrapes and probes.
service.onShutdown(
  [
    { name: "worker", run: () => worker.close() },
    { name: "retention", run: async () => retention?.stop() },
    { name: "http", run: () => service.close() },
    { name: "metrics queue", run: () => countsQueue.close() },
    { name: "redis", run: () => Promise.all([redis.quit(), metricsRedis.quit()]) },
    { name: "postgres", run: () => db.close() },
    { name: "telemetry", run: () => telemetry.shutdown() },
  ],
  { drainMs: env.SHUTDOWN_DRAIN_MS, deadlineMs: env.WEBHOOK_TIMEOUT_MS + 10_000 },
);
