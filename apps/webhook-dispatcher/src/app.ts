import type { Db } from "@botdir/db";
import {
  errorHandler,
  type Logger,
  metricsHandler,
  notFound,
  type RedisClient,
  type Registry,
  requestId,
  runHealthChecks,
} from "@botdir/service-kit";
import express, { type Express } from "express";

export interface DispatcherHttpDeps {
  db: Db;
  redis: RedisClient;
  logger: Logger;
  /** The replica's Prometheus registry, served at GET /metrics (src/metrics.ts). */
  metrics?: { registry: Registry };
}

/** The dispatcher's internal listener: GET /health and GET /metrics. */
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
  if (deps.metrics) app.get("/metrics", metricsHandler(deps.metrics.registry));
  app.use(notFound());
  app.use(errorHandler(deps.logger));
  return app;
}
