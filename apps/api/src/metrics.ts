/**
 * The API's Prometheus series. The API port is public, so /metrics is NOT served there: main.ts
 * serves this registry on a second, internal listener (METRICS_PORT) that only Prometheus reaches.
 */
import {
  type CounterSeries,
  createBatchMetrics,
  createCounterSeries,
  createHttpMetrics,
  createMetricsRegistry,
  errorHandler,
  type HttpMetrics,
  type Logger,
  type MetricsRegistryOptions,
  metricsHandler,
  notFound,
  type Registry,
} from "@botdir/service-kit";
import express, { type Express } from "express";
import { FLOOD_CLASSES, type FloodClass } from "./http/flood-budget.js";
import { LIMITED_ENDPOINTS, type LimitedEndpoint, type RateLimiter } from "./services/ratelimit.js";

export interface ApiMetrics {
  registry: Registry;
  http: HttpMetrics;
  /** `botdir_rate_limit_rejections_total{endpoint}`, one series per endpoint. */
  rejections: Record<LimitedEndpoint, CounterSeries>;
  /** `botdir_rate_limit_fail_open_total{endpoint}`, one series per endpoint. */
  failOpen: Record<LimitedEndpoint, CounterSeries>;
  /** `botdir_rate_limit_local_fallback_total{endpoint}`: decisions counted by this process alone. */
  localFallback: Record<LimitedEndpoint, CounterSeries>;
  /** `botdir_flood_shed_total{class}`: unverified requests answered 503 by the flood budget. */
  shed: Record<FloodClass, CounterSeries>;
  /** Counts one batched statement of `size` requests (createBatchMetrics). */
  batch(statement: BatchedStatement): (size: number) => void;
}

export const BATCHED_STATEMENTS = ["check", "stats", "auth"] as const;
export type BatchedStatement = (typeof BATCHED_STATEMENTS)[number];

export function createApiMetrics(options: MetricsRegistryOptions = {}): ApiMetrics {
  const registry = createMetricsRegistry("api", options);
  const rejections = createCounterSeries(registry, LIMITED_ENDPOINTS, {
    name: "botdir_rate_limit_rejections_total",
    help: "Requests over the token's per-endpoint budget (answered 429 unless 401/404 came first).",
    label: "endpoint",
  });
  const failOpen = createCounterSeries(registry, LIMITED_ENDPOINTS, {
    name: "botdir_rate_limit_fail_open_total",
    help: "Requests let through unlimited: the limiter's Redis failed or was too slow and the process could not count them either.",
    label: "endpoint",
  });
  const localFallback = createCounterSeries(registry, LIMITED_ENDPOINTS, {
    name: "botdir_rate_limit_local_fallback_total",
    help: "Rate-limit decisions this process counted alone (its share of the limit) because the limiter's Redis failed or was too slow.",
    label: "endpoint",
  });
  const shed = createCounterSeries(registry, FLOOD_CLASSES, {
    name: "botdir_flood_shed_total",
    help: "Requests that needed I/O to be refused or answered (an unknown token, an uncached widget id) answered 503 by the flood budget.",
    label: "class",
  });
  const batchObservers = createBatchMetrics(registry, BATCHED_STATEMENTS);
  return {
    registry,
    batch: (statement) => batchObservers[statement],
    http: createHttpMetrics(registry),
    rejections,
    failOpen,
    localFallback,
    shed,
  };
}

/** Counts the limiter's refusals and fail-open decisions; the decision itself is unchanged. */
export function instrumentLimiter(limiter: RateLimiter, metrics: ApiMetrics): RateLimiter {
  const count = <D extends { kind: string }>(endpoint: LimitedEndpoint, decision: D): D => {
    if (decision.kind === "limited") metrics.rejections[endpoint].inc();
    else if (decision.kind === "unknown") metrics.failOpen[endpoint].inc();
    if ("local" in decision && decision.local === true) metrics.localFallback[endpoint].inc();
    return decision;
  };
  return {
    consume: async (endpoint, key, existing) =>
      count(endpoint, await limiter.consume(endpoint, key, existing)),
    consumeExisting: async (endpoint, key) => count(endpoint, await limiter.consumeExisting(endpoint, key)),
  };
}

/** The internal metrics listener: GET /metrics, a JSON 404 for anything else. */
export function createMetricsApp(registry: Registry, logger: Logger): Express {
  const app = express();
  app.disable("x-powered-by");
  app.get("/metrics", metricsHandler(registry));
  app.use(notFound());
  app.use(errorHandler(logger));
  return app;
}
