import type { Db } from "@botdir/db";
import { type Clock, errorHandler, type Logger, notFound, requestId, requestLog } from "@botdir/schema";
import express, { type Express } from "express";
import type { Redis } from "ioredis";
import { registerHealth } from "./routes/health.js";

export interface IngestDeps {
  db: Db;
  redis: Redis;
  clock: Clock;
  logger: Logger;
  internalApiKey: string;
}

/** Wires middleware and routes of the internal listener; nothing else. */
export function createApp(deps: IngestDeps): Express {
  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);
  app.use(requestId());
  app.use(requestLog(deps.logger));

  const router = express.Router();
  registerHealth(router, deps);
  app.use(router);

  app.use(notFound());
  app.use(errorHandler(deps.logger));
  return app;
}
