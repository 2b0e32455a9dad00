import type { Db } from "@botdir/db";
import { errorHandler, type Logger, notFound, requestId, runHealthChecks } from "@botdir/schema";
import express, { type Express } from "express";
import type { Redis } from "ioredis";

export interface DispatcherHttpDeps {
  db: Db;
  redis: Redis;
  logger: Logger;
}

/** The dispatcher's internal listener: GET /health (and metrics, later). */
export function createHttpApp(deps: DispatcherHttpDeps): Express {
  const app = express();
  app.disable("x-powered-by");
  app.use(requestId());
  app.get("/health", async (_req, res) => {
    const report = await runHealthChecks({
      postgres: () => deps.db.pool.query("SELECT 1"),
      redis: () => deps.redis.ping(),
    });
    res.setHeader("Cache-Control", "no-store");
    res.status(report.ok ? 200 : 503).json(report.body);
  });
  app.use(notFound());
  app.use(errorHandler(deps.logger));
  return app;
}
