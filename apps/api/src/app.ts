import type { RequestListener } from "node:http";
import { type BatchLimits, createBatcher, DEFAULT_BATCH_LIMITS } from "@botdir/batcher";
import { isRetryableConflict } from "@botdir/db";
import { errorHandler, notFound, requestContext } from "@botdir/service-kit";
import express, { type Express, type Request } from "express";
import type { ApiContext } from "./context.js";
import { type ApiDeps, DEFAULT_REDIS_PREFIX } from "./deps.js";
import { createEarlyRefusals } from "./http/early-refusals.js";
import { createFloodBudget } from "./http/flood-budget.js";
import { DEFAULT_BODY_LIMITS } from "./http/json-body.js";
import { createApiMetrics, instrumentLimiter } from "./metrics.js";
import { registerCheck } from "./routes/check.js";
import { registerCommands } from "./routes/commands.js";
import { registerDeliveries } from "./routes/deliveries.js";
import { registerDocs } from "./routes/docs.js";
import { registerHealth } from "./routes/health.js";
import { registerOpenApi } from "./routes/openapi.js";
import { registerRecover } from "./routes/recover.js";
import { registerRedeliver } from "./routes/redeliver.js";
import { registerStats } from "./routes/stats.js";
import { registerVotes } from "./routes/votes.js";
import { registerWidget } from "./routes/widget.js";
import { findBotIdsByTokens } from "./services/auth.js";
import { findVoteWindows, writeStats } from "./services/bots.js";
import { createCaches } from "./services/cache.js";
import { createLimitNotes } from "./services/limit-notes.js";
import { createRateLimiter } from "./services/ratelimit.js";
import { traceLimiter, traceStatement } from "./tracing.js";

/** `//` in a path (clients that join a base URL ending in `/` with a path starting with `/`). */
function collapseSlashes(req: Request): void {
  const q = req.url.indexOf("?");
  const path = q === -1 ? req.url : req.url.slice(0, q);
  if (path.includes("//")) req.url = path.replace(/\/{2,}/g, "/") + (q === -1 ? "" : req.url.slice(q));
}

/** Wires middleware and routes, and the early refusals in front of them; nothing else. */
/** The API's request listener; `express` is the Express app behind the early refusals (route listings). */
export type ApiApp = RequestListener & { express: Express };

export function createApp(deps: ApiDeps): ApiApp {
  const prefix = deps.redisPrefix ?? DEFAULT_REDIS_PREFIX;
  const metrics = deps.metrics ?? createApiMetrics();
  const batching: BatchLimits = { ...DEFAULT_BATCH_LIMITS, ...deps.batching };
  const limiter = instrumentLimiter(
    createRateLimiter({
      redis: deps.redis,
      prefix,
      limits: deps.limits,
      timeoutMs: deps.limiterTimeoutMs,
      localShare: deps.limiterLocalShare,
      logger: deps.logger,
      clock: deps.clock,
      batching,
    }),
    metrics,
  );
  const ctx: ApiContext = {
    db: deps.db,
    clock: deps.clock,
    logger: deps.logger,
    bodyLimits: { ...DEFAULT_BODY_LIMITS, ...deps.bodyLimits },
    limiter: traceLimiter(limiter),
    tokens: deps.tokens ?? null,
    flood:
      deps.flood === false
        ? null
        : createFloodBudget({ ...deps.flood, onShed: (kind) => metrics.shed[kind].inc() }),
    // A request refused from a note is a rate-limit rejection like one Redis decided.
    limitNotes: createLimitNotes({ onRefusal: (endpoint) => metrics.rejections[endpoint].inc() }),
    caches: createCaches({ redis: deps.redis, prefix, logger: deps.logger, clock: deps.clock }),
    // `/check`'s read: no span (below, with its limiter).
    voteWindow: createBatcher({
      ...batching,
      run: (keys) => findVoteWindows(deps.db, keys),
      onBatch: metrics.batch("check"),
    }),
    authenticate: traceStatement(
      "authenticate",
      createBatcher({
        ...batching,
        run: (hashes) => findBotIdsByTokens(deps.db, hashes),
        onBatch: metrics.batch("auth"),
      }),
    ),
    writeStats: traceStatement(
      "write_stats",
      createBatcher({
        ...batching,
        run: (inputs) => writeStats(deps.db, inputs),
        conflictKey: (input) => input.tokenHash,
        retryAlone: isRetryableConflict,
        onBatch: metrics.batch("stats"),
      }),
    ),
  };

  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);
  app.set("trust proxy", true);
  // Request id, log line, metrics and the `//` fix in one middleware: one Express layer per request.
  // The public edge: a caller's traceparent is a link of the request's new trace, never its parent.
  const context = requestContext(deps.logger, metrics.http, { callerTrace: "link" });
  app.use((req, res, next) => {
    collapseSlashes(req);
    context(req, res, next);
  });

  // Routes go on the app's own router (a nested Router would add a second dispatch per request),
  // and Express tries them in registration order, so the hottest go first (no two overlap).
  const router = app.router;
  // `/check` records its server span only (apps/api/src/tracing.ts): its limiter decisions and its
  // vote-window read (above) make no span, and pass through no tracing wrapper.
  registerCheck(router, { ...ctx, limiter });
  registerStats(router, ctx);
  registerVotes(router, ctx);
  registerCommands(router, ctx);
  registerDeliveries(router, ctx);
  registerRedeliver(router, ctx);
  registerRecover(router, ctx);
  registerWidget(router, ctx);
  registerHealth(router, deps);
  registerOpenApi(router);
  registerDocs(router);

  app.use(notFound());
  app.use(errorHandler(deps.logger));

  // The refusals that need no per-request I/O are answered before Express (http/early-refusals.ts).
  const listener: RequestListener = createEarlyRefusals(
    ctx,
    { logger: deps.logger, metrics: metrics.http },
    (req, res) => app(req, res),
  );
  return Object.assign(listener, { express: app });
}
