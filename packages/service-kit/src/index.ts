export type { Clock } from "./clock.js";
export { ManualClock, systemClock } from "./clock.js";
export type { KeyRingEnv } from "./env.js";
export {
  checkClusterQueuePrefix,
  checkHttpTimeouts,
  checkKeyRing,
  connectionsOf,
  databaseOf,
  dbConnectTimeout,
  decodeEncryptionKey,
  EnvError,
  EnvFields,
  hashTagOf,
  httpTimeoutsOf,
  keyRing,
  loadEnvOrExit,
  parseEnv,
  redisTargetOf,
  ServiceEnvFields,
} from "./env.js";
export type { HealthChecks, HealthReport } from "./health.js";
export { healthHandler, runHealthChecks } from "./health.js";
export type { Logger, ShutdownStep } from "./http.js";
export {
  closeServer,
  describeError,
  earlyRequestContext,
  errorHandler,
  jsonClientErrors,
  LOG_CENSOR,
  listen,
  loggerOptions,
  loggerWith,
  methodNotAllowed,
  notFound,
  redactSecrets,
  requestContext,
  requestId,
  requestKeptTraceparent,
  requestLog,
  requestTrace,
  requestTraceparent,
  requireJson,
  SERVER_ERROR_RETRY_AFTER_SECONDS,
  scrubSecrets,
  sendApiError,
  sendJson,
  stopAccepting,
  type TraceEdgeOptions,
  toApiError,
} from "./http.js";
export type { CounterSeries, HttpMetrics, MetricsRegistryOptions, ScrapeSources } from "./metrics.js";
export {
  boundedRead,
  Counter,
  createBatchMetrics,
  createCounterSeries,
  createHttpMetrics,
  createMetricsRegistry,
  createScrapeSources,
  Gauge,
  Histogram,
  HTTP_DURATION_BUCKETS,
  metricsHandler,
  Registry,
  routeBase,
  routeLabel,
  SCRAPE_TIMEOUT_MS,
  UNMATCHED_ROUTE,
} from "./metrics.js";
export type { RedisClient, RedisRole, RedisTarget } from "./redis.js";
export { createRedis, FAIL_FAST_REDIS, groupBySlot, isCluster, parseClusterNodes } from "./redis.js";
export type { HttpTimeouts, ServeOptions, Service, ServiceState } from "./serve.js";
export {
  createHttpServer,
  DEFAULT_HTTP_TIMEOUTS,
  httpTimeoutsProblem,
  ListenError,
  serve,
  serveOrExit,
} from "./serve.js";
export type { Link, SpanStart, Telemetry, TelemetryEnv } from "./telemetry.js";
export {
  activeSpanRecorded,
  activeTraceId,
  activeTraceparent,
  contextOf,
  failSpan,
  inContext,
  inSpan,
  linkTo,
  parseKeyValues,
  recordedUnder,
  SpanKind,
  spanContextOf,
  spanLogFields,
  startSpan,
  startTelemetry,
  storedTraceLogFields,
  TelemetryEnvFields,
  telemetryEnvFields,
  traceIdOf,
  traceIdOfSpan,
  traceLogFields,
  traceparentOf,
  tracer,
  tracesExported,
} from "./telemetry.js";
export { TimeoutError, withLoopTimeout, withTimeout } from "./timeout.js";
