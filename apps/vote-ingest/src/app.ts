import { errorHandler, metricsHandler, notFound, requestContext } from "@botdir/service-kit";
import express, { type Express } from "express";
import type { IngestDeps } from "./deps.js";
import { createIngestMetrics } from "./metrics.js";
import { registerBotManagement } from "./routes/bots.js";
import { registerHealth } from "./routes/health.js";
import { registerOpenApi } from "./routes/openapi.js";
import { registerVotes } from "./routes/votes.js";
import { createVotes } from "./services/votes.js";

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
