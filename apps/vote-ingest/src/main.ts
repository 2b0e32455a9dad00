import { createServer } from "node:http";
import { createDb } from "@botdir/db";
import {
  closeServer,
  FAIL_FAST_REDIS,
  jsonClientErrors,
  listen,
  loggerOptions,
  onShutdown,
  systemClock,
} from "@botdir/schema";
import { Redis } from "ioredis";
import { pino } from "pino";
import { createApp } from "./app.js";
import { loadEnv } from "./env.js";
import { createIngestMetrics } from "./metrics.js";
import { createDeliveryQueue } from "./outbox/queue.js";
import { createOutboxRelay } from "./outbox/relay.js";
import { secretBoxFromKey } from "./services/listings.js";

const env = loadEnv();
const logger = pino(loggerOptions("vote-ingest", env.LOG_LEVEL));
const db = createDb({ url: env.DATABASE_URL, poolMax: env.DB_POOL_MAX });
// A producer: fail fast while Redis is down (the vote still gets its 201; the relay hands off later).
const redis = new Redis(env.REDIS_URL, FAIL_FAST_REDIS);
redis.on("error", () => {});
const deliveryQueue = createDeliveryQueue({ db, redis, prefix: env.QUEUE_PREFIX, logger });
const relay = createOutboxRelay({
  db,
  queue: deliveryQueue,
  clock: systemClock,
  logger,
  intervalMs: env.OUTBOX_RELAY_INTERVAL_MS,
  staleMs: env.OUTBOX_STALE_MS,
});

const server = createServer(
  createApp({
    db,
    redis,
    clock: systemClock,
    logger,
    internalApiKey: env.INTERNAL_API_KEY ?? "",
    deliveryQueue,
    secretBox: secretBoxFromKey(env.SECRET_ENCRYPTION_KEY),
    allowPrivateTargets: env.WEBHOOK_ALLOW_PRIVATE_TARGETS,
    metrics: createIngestMetrics({ outbox: relay }, { processMetrics: true }),
  }),
);
jsonClientErrors(server);
await listen(server, env.INGEST_PORT);
logger.info({ port: env.INGEST_PORT }, "vote-ingest listening");
relay.start();

onShutdown(logger, [
  { name: "outbox relay", run: () => relay.stop() },
  { name: "http", run: () => closeServer(server) },
  { name: "delivery queue", run: () => deliveryQueue.close() },
  { name: "redis", run: () => redis.quit() },
  { name: "postgres", run: () => db.close() },
]);
