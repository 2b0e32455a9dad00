import { createServer } from "node:http";
import { createDb } from "@botdir/db";
import { closeServer, listen, onShutdown, systemClock } from "@botdir/schema";
import { Redis } from "ioredis";
import { pino } from "pino";
import { createApp } from "./app.js";
import { loadEnv } from "./env.js";

const env = loadEnv();
const logger = pino({ name: "api", level: env.LOG_LEVEL });
const db = createDb({ url: env.DATABASE_URL, poolMax: env.DB_POOL_MAX });
// Fail fast while Redis is down (the limiter fails open) instead of queueing commands.
const redis = new Redis(env.REDIS_URL, {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 1,
  connectTimeout: 2_000,
  lazyConnect: false,
});
redis.on("error", () => {}); // reconnects by itself; health reports it

const server = createServer(createApp({ db, redis, clock: systemClock, logger }));
await listen(server, env.API_PORT);
logger.info({ port: env.API_PORT }, "api listening");

onShutdown(logger, [
  { name: "http", run: () => closeServer(server) },
  { name: "redis", run: () => redis.quit() },
  { name: "postgres", run: () => db.close() },
]);
