import type { Db, SecretBox } from "@botdir/db";
import {
  type BatchLimits,
  type Clock,
  errorHandler,
  type Logger,
  metricsHandler,
  notFound,
  type Resolver,
  requestContext,
} from "@botdir/schema";
import express, { type Express } from "express";
import type { Redis } from "ioredis";
import { createIngestMetrics, type IngestMetrics } from "./metrics.js";
import type { DeliveryQueue } from "./outbox/queue.js";
import { registerBotManagement } from "./routes/bots.js";
import { registerHealth } from "./routes/health.js";
import { registerOpenApi } from "./routes/openapi.js";
import { registerVotes } from "./routes/votes.js";
import { createVotes } from "./services/votes.js";

export interface IngestDeps {
  db: Db;
  redis: Redis;
  clock: Clock;
  logger: Logger;
  internalApiKey: string;
  /** Producer of webhook delivery jobs; without it every delivery waits for the outbox relay. */
  deliveryQueue?: DeliveryQueue;
  /** Encrypts webhook secrets at rest (SECRET_ENCRYPTION_KEY); without it a webhook cannot be set. */
  secretBox?: SecretBox | null;
  /** WEBHOOK_ALLOW_PRIVATE_TARGETS: http and private webhook hosts allowed (development, tests). */
  allowPrivateTargets?: boolean;
  /** Resolves webhook host names when a URL is set (default: the system resolver; null skips DNS). */
  webhookResolver?: Resolver | null;
  /** Prometheus series of this app instance, served at GET /metrics (default: a fresh registry). */
  metrics?: IngestMetrics;
  /** Vote-casting statements in flight and votes per statement (default DEFAULT_BATCH_LIMITS). */
  batching?: BatchLimits;
}

/** Wires middleware and routes of the internal listener; nothing else. */
export function createApp(deps: IngestDeps): Express {
  const metrics = deps.metrics ?? createIngestMetrics();
  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);
  app.use(requestContext(deps.logger, metrics.http));

  // Routes go on the app's own router (no nested Router dispatch), the hot vote route first.
  const router = app.router;
  registerVotes(router, {
    votes: createVotes({ ...deps, onBatch: (size) => metrics.castBatch(size) }),
    internalApiKey: deps.internalApiKey,
  });
  registerHealth(router, deps);
  router.get("/metrics", metricsHandler(metrics.registry));
  registerBotManagement(router, deps);
  registerOpenApi(router, deps);

  app.use(notFound());
  app.use(errorHandler(deps.logger));
  return app;
}
