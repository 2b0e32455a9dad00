import { createServer } from "node:http";
import { createDb } from "@botdir/db";
import { closeServer, listen, onShutdown } from "@botdir/schema";
import { Redis } from "ioredis";
import { pino } from "pino";
import { createHttpApp } from "./app.js";
import { loadEnv } from "./env.js";

const env = loadEnv();
const logger = pino({ name: "webhook-dispatcher", level: env.LOG_LEVEL });
const db = createDb({ url: env.DATABASE_URL, poolMax: env.DB_POOL_MAX });
const redis = new Redis(env.REDIS_URL, { maxRetriesPerRequest: null });
redis.on("error", () => {});

const server = createServer(createHttpApp({ db, redis, logger }));
await listen(server, env.DISPATCHER_PORT);
logger.info({ port: env.DISPATCHER_PORT }, "webhook-dispatcher listening");

onShutdown(logger, [
  { name: "http", run: () => closeServer(server) },
  { name: "redis", run: () => redis.quit() },
  { name: "postgres", run: () => db.close() },
]);
