import type { Db } from "@botdir/db";
import {
  errorHandler,
  healthHandler,
  type Logger,
  metricsHandler,
  notFound,
  type RedisClient,
  type Registry,
  requestId,
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
  app.get("/health", healthHandler(deps));
  if (deps.metrics) app.get("/metrics", metricsHandler(deps.metrics.registry));
  app.use(notFound());
  app.use(errorHandler(deps.logger));
  return app;
}
