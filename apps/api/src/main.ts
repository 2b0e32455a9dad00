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
import { createApiMetrics, createMetricsApp } from "./metrics.js";

const env = loadEnv();
const logger = pino(loggerOptions("api", env.LOG_LEVEL));
const db = createDb({ url: env.DATABASE_URL, poolMax: env.DB_POOL_MAX });
// Fail fast while Redis is down (the limiter fails open) instead of queueing commands. No
// auto-pipelining: the limiter already sends one command per batch of requests (createBatcher).
const redis = new Redis(env.REDIS_URL, FAIL_FAST_REDIS);
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
