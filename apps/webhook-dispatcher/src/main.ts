import { createServer } from "node:http";
import { createDb, createSecretBox, parseEncryptionKey } from "@botdir/db";
import {
  closeServer,
  FAIL_FAST_REDIS,
  jsonClientErrors,
  listen,
  loggerOptions,
  onShutdown,
  QUEUES,
  systemClock,
} from "@botdir/schema";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { pino } from "pino";
import { createHttpApp } from "./app.js";
import { warmUp } from "./deliveries.js";
import { loadEnv } from "./env.js";
import { createDispatcherMetrics } from "./metrics.js";
import { createDispatcherWorker } from "./worker.js";

const env = loadEnv();
const logger = pino(loggerOptions("webhook-dispatcher", env.LOG_LEVEL));
const key = parseEncryptionKey(env.SECRET_ENCRYPTION_KEY);
if (!key) {
  process.stderr.write("Invalid environment: SECRET_ENCRYPTION_KEY must be 32 bytes.\n");
  process.exit(1);
}
const db = createDb({ url: env.DATABASE_URL, poolMax: env.DB_POOL_MAX });
// BullMQ needs maxRetriesPerRequest: null on worker connections; auto-pipelining stays off so
// blocking commands and Lua scripts are not batched behind each other.
const redis = new Redis(env.REDIS_URL, { maxRetriesPerRequest: null, enableAutoPipelining: false });
redis.on("error", () => {});
// The queue-depth gauge reads job counts on a fail-fast connection of its own, so a scrape while
// Redis is down answers at once instead of waiting in the worker connection's offline queue.
const metricsRedis = new Redis(env.REDIS_URL, FAIL_FAST_REDIS);
metricsRedis.on("error", () => {});
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
  { db, redis, secrets: createSecretBox(key), clock: systemClock, logger, metrics },
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
  },
);
if (env.WEBHOOK_ALLOW_PRIVATE_TARGETS) {
  logger.warn({}, "WEBHOOK_ALLOW_PRIVATE_TARGETS is on: webhooks may reach http and private addresses");
}

const server = createServer(createHttpApp({ db, redis, logger, metrics }));
jsonClientErrors(server);
await listen(server, env.DISPATCHER_PORT);
logger.info(
  { port: env.DISPATCHER_PORT, concurrency: env.DISPATCHER_CONCURRENCY, prefix: env.QUEUE_PREFIX },
  "webhook-dispatcher listening",
);

// worker.close() takes no new jobs and waits for the attempts in flight (each ends within the
// HTTP timeout); anything still running at the deadline is taken over by another replica once its
// job lock and its claim in PostgreSQL expire.
onShutdown(
  logger,
  [
    { name: "worker", run: () => worker.close() },
    { name: "http", run: () => closeServer(server) },
    { name: "metrics queue", run: () => countsQueue.close() },
    { name: "redis", run: () => Promise.all([redis.quit(), metricsRedis.quit()]) },
    { name: "postgres", run: () => db.close() },
  ],
  env.WEBHOOK_TIMEOUT_MS + 10_000,
);
