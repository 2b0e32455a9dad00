import { createServer } from "node:http";
import { createDb } from "@botdir/db";
import { closeServer, listen, onShutdown, systemClock } from "@botdir/schema";
import { Redis } from "ioredis";
import { pino } from "pino";
import { createApp } from "./app.js";
import { loadEnv } from "./env.js";

const env = loadEnv();
const logger = pino({ name: "vote-ingest", level: env.LOG_LEVEL });
const db = createDb({ url: env.DATABASE_URL, poolMax: env.DB_POOL_MAX });
const redis = new Redis(env.REDIS_URL, {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 1,
  connectTimeout: 2_000,
});
redis.on("error", () => {});

const server = createServer(
  createApp({ db, redis, clock: systemClock, logger, internalApiKey: env.INTERNAL_API_KEY ?? "" }),
);
await listen(server, env.INGEST_PORT);
logger.info({ port: env.INGEST_PORT }, "vote-ingest listening");

onShutdown(logger, [
  { name: "http", run: () => closeServer(server) },
  { name: "redis", run: () => redis.quit() },
  { name: "postgres", run: () => db.close() },
]);
