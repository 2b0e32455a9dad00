import { createServer } from "node:http";
import { createDb } from "@botdir/db";
import {
  closeServer,
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
import { createApiMetrics, createMetricsApp } from "./metrics.js";

const env = loadEnv();
const logger = pino(loggerOptions("api", env.LOG_LEVEL));
const db = createDb({ url: env.DATABASE_URL, poolMax: env.DB_POOL_MAX });
// Fail fast while Redis is down (the limiter fails open) instead of queueing commands. No
// auto-pipelining: the limiter already sends one command per batch of requests (createBatcher, @botdir/schema).
const redis = new Redis(env.REDIS_URL, {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 1,
  connectTimeout: 2_000,
  lazyConnect: false,
});
redis.on("error", () => {}); // reconnects by itself; health reports it

const metrics = createApiMetrics({ processMetrics: true });
const server = createServer(createApp({ db, redis, clock: systemClock, logger, metrics }));
const metricsServer = createServer(createMetricsApp(metrics.registry, logger));
jsonClientErrors(server);
await listen(server, env.API_PORT);
await listen(metricsServer, env.METRICS_PORT);
logger.info({ port: env.API_PORT, metricsPort: env.METRICS_PORT }, "api listening");

onShutdown(logger, [
  { name: "http", run: () => closeServer(server) },
  { name: "metrics", run: () => closeServer(metricsServer) },
  { name: "redis", run: () => redis.quit() },
  { name: "postgres", run: () => db.close() },
]);
