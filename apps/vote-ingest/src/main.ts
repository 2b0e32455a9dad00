import { createDb } from "@botdir/db";
import {
  connectionsOf,
  createRedis,
  loggerOptions,
  serveOrExit,
  startTelemetry,
  systemClock,
} from "@botdir/service-kit";
import { createDnsResolver } from "@botdir/webhook-targets";
import { pino } from "pino";
import { createApp } from "./app.js";
import { loadEnv } from "./env.js";
import { createIngestMetrics } from "./metrics.js";
import { createDeliveryQueue } from "./outbox/queue.js";
import { createRecoveryDriver } from "./outbox/recovery.js";
import { createOutboxRelay } from "./outbox/relay.js";
import { createReminderScheduler } from "./outbox/reminders.js";
import { secretBoxFromEnv } from "./services/listings.js";

const env = loadEnv();
// First: every span (and every log line's trace_id) needs the provider and the context manager.
const telemetry = startTelemetry(env);
const logger = pino(loggerOptions("vote-ingest", env.LOG_LEVEL, { nodeEnv: env.NODE_ENV }));
// One line: whether spans are exported, where to (no credentials) and with which sampler.
logger.info(telemetry.startLine.fields, telemetry.startLine.msg);
// Failed exports and dropped spans: a warning line at most once a minute of each kind.
telemetry.reportProblems((fields, msg) => logger.warn(fields, msg));
const connections = connectionsOf(env, logger);
const db = createDb(connections.database);
// A producer: fail fast while Redis is down (the vote still gets its 201; the relay hands off later).
const redis = createRedis(connections.redis, "fail-fast");
const deliveryQueue = createDeliveryQueue({
  db,
  redis,
  prefix: env.QUEUE_PREFIX,
  logger,
  batchMax: env.DELIVERY_JOB_BATCH_MAX,
});
const relay = createOutboxRelay({
  db,
  queue: deliveryQueue,
  clock: systemClock,
  logger,
  intervalMs: env.OUTBOX_RELAY_INTERVAL_MS,
  staleMs: env.OUTBOX_STALE_MS,
});
// Queues the votes of running recoveries in keyset batches (docs/webhooks.md "Recovering undelivered votes").
const recoveries = createRecoveryDriver({
  db,
  queue: deliveryQueue,
  clock: systemClock,
  logger,
  intervalMs: env.RECOVERY_INTERVAL_MS,
  batchSize: env.RECOVERY_BATCH,
  maxInFlight: env.RECOVERY_MAX_IN_FLIGHT,
  maxPerSecond: env.RECOVERY_MAX_PER_SECOND,
});
// Makes the vote.available deliveries of windows that ended (docs/webhooks.md "vote.available").
const reminders = createReminderScheduler({
  db,
  queue: deliveryQueue,
  clock: systemClock,
  logger,
  intervalMs: env.REMINDER_INTERVAL_MS,
  batchSize: env.REMINDER_BATCH,
});

const metrics = createIngestMetrics({ outbox: relay }, { processMetrics: true });
// /readyz needs PostgreSQL only: a vote is recorded without Redis (the relay hands it off later).
const service = await serveOrExit({
  logger,
  app: createApp({
    db,
    redis,
    clock: systemClock,
    logger,
    internalApiKey: env.INTERNAL_API_KEY ?? "",
    deliveryQueue,
    secretBox: secretBoxFromEnv(env),
    allowPrivateTargets: env.WEBHOOK_ALLOW_PRIVATE_TARGETS,
    webhookSecretOverlapMs: env.WEBHOOK_SECRET_OVERLAP_MS,
    webhookResolver: createDnsResolver({
      timeoutMs: env.WEBHOOK_DNS_TIMEOUT_MS,
      ...(env.WEBHOOK_DNS_SERVERS ? { servers: env.WEBHOOK_DNS_SERVERS } : {}),
    }),
    webhookDnsTimeoutMs: env.WEBHOOK_DNS_TIMEOUT_MS,
    metrics,
  }),
  port: env.INGEST_PORT,
  portVariable: "INGEST_PORT",
  timeouts: connections.httpTimeouts,
  readiness: { postgres: () => db.pool.query("SELECT 1") },
  metrics: metrics.registry,
});
logger.info({ port: env.INGEST_PORT }, "vote-ingest listening");
relay.start();
recoveries.start();
reminders.start();

service.onShutdown(
  [
    { name: "outbox relay", run: () => relay.stop() },
    { name: "recovery driver", run: () => recoveries.stop() },
    { name: "reminder scheduler", run: () => reminders.stop() },
    { name: "http", run: () => service.close() },
    { name: "delivery queue", run: () => deliveryQueue.close() },
    { name: "redis", run: () => redis.quit() },
    { name: "postgres", run: () => db.close() },
    { name: "telemetry", run: () => telemetry.shutdown() },
  ],
  { drainMs: env.SHUTDOWN_DRAIN_MS },
);
