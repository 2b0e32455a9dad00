import { createDb } from "@botdir/db";
import {
  connectionsOf,
  createRedis,
  loggerOptions,
  serveOrExit,
  startTelemetry,
  systemClock,
} from "@botdir/service-kit";
import { pino } from "pino";
import { createApp } from "./app.js";
import { loadEnv } from "./env.js";
import { createApiMetrics, createMetricsApp } from "./metrics.js";
import { createTokenSet, TOKEN_LISTEN_APPLICATION_NAME } from "./services/token-set.js";

const env = loadEnv();
// First: every span (and every log line's trace_id) needs the provider and the context manager.
const telemetry = startTelemetry(env);
const logger = pino(loggerOptions("api", env.LOG_LEVEL, { nodeEnv: env.NODE_ENV }));
// One line: whether spans are exported, where to (no credentials) and with which sampler.
logger.info(telemetry.startLine.fields, telemetry.startLine.msg);
// Failed exports and dropped spans: a warning line at most once a minute of each kind.
telemetry.reportProblems((fields, msg) => logger.warn(fields, msg));
const connections = connectionsOf(env, logger);
const db = createDb(connections.database);
// Fail fast while Redis is down (the limiter counts locally) instead of queueing commands. No
// auto-pipelining: the limiter already sends one command per batch of requests (createBatcher).
const redis = createRedis(connections.redis, "fail-fast");

// The valid token hashes, on a connection of their own held for LISTEN (not one of the pool's, so
// requests keep all DB_POOL_MAX): once it is loaded, unknown tokens are refused without a lookup of
// their own, after a barrier shared by the process's misses (until then, and whenever it is not
// fresh, PostgreSQL decides).
const tokens = createTokenSet({
  connect: () =>
    db.connectDedicated(env.DATABASE_LISTEN_URL ?? env.DATABASE_DIRECT_URL, {
      applicationName: TOKEN_LISTEN_APPLICATION_NAME,
    }),
  logger,
});
tokens.start();

const metrics = createApiMetrics({ processMetrics: true });
// /readyz needs PostgreSQL only: without Redis the limiter counts locally and the API still serves
// (/api/health still reports Redis, as the spec's health of the service).
const service = await serveOrExit({
  logger,
  app: createApp({
    db,
    redis,
    clock: systemClock,
    logger,
    metrics,
    tokens,
    limiterLocalShare: 1 / env.API_REPLICAS,
    flood: {
      lagThresholdMs: env.API_SHED_LAG_MS,
      maxPending: {
        unknown_token: env.API_FLOOD_MAX_PENDING,
        widget: Math.min(env.API_FLOOD_MAX_PENDING, Math.max(1, Math.floor(env.DB_POOL_MAX / 2))),
      },
    },
  }),
  port: env.API_PORT,
  portVariable: "API_PORT",
  timeouts: connections.httpTimeouts,
  readiness: { postgres: () => db.pool.query("SELECT 1") },
  metrics: metrics.registry,
  extra: [
    {
      name: "metrics",
      app: createMetricsApp(metrics.registry, logger),
      port: env.METRICS_PORT,
      portVariable: "METRICS_PORT",
    },
  ],
});
logger.info({ port: env.API_PORT, metricsPort: env.METRICS_PORT }, "api listening");

service.onShutdown(
  [
    { name: "http", run: () => service.close() },
    { name: "token set", run: () => tokens.stop() },
    { name: "redis", run: () => redis.quit() },
    { name: "postgres", run: () => db.close() },
    { name: "telemetry", run: () => telemetry.shutdown() },
  ],
  { drainMs: env.SHUTDOWN_DRAIN_MS },
);
