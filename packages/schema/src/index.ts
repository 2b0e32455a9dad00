export {
  type Batched,
  type BatchLimits,
  type BatchOptions,
  createBatcher,
  DEFAULT_BATCH_LIMITS,
} from "./batch.js";
export type { Clock } from "./clock.js";
export { ManualClock, systemClock } from "./clock.js";
export { COMMAND_LIMITS, Command, CommandsBody, CommandsResponse, dedupeCommands } from "./commands.js";
export { EnvError, EnvFields, FAIL_FAST_REDIS, loadEnvOrExit, parseEnv } from "./env.js";
export type { ErrorBodyShape, ErrorCode } from "./errors.js";
export { ApiError, describeIssue, ERROR_STATUS, ErrorBody, MESSAGES, parseOrThrow } from "./errors.js";
export type { HealthChecks, HealthReport } from "./health.js";
export { HealthBody, runHealthChecks } from "./health.js";
export type { Logger, ShutdownStep } from "./http.js";
export {
  closeServer,
  describeError,
  errorHandler,
  jsonClientErrors,
  LOG_REDACT_PATHS,
  listen,
  loggerOptions,
  methodNotAllowed,
  notFound,
  onShutdown,
  requestContext,
  requestId,
  requestLog,
  requireJson,
  scrubSecrets,
  sendJson,
  toApiError,
} from "./http.js";
export { BotId, isBotId, USER_ID_PATTERN, UserId } from "./ids.js";
export type { DeliveryHandOff, JobDefinition, JobName } from "./jobs.js";
export { DEFAULT_QUEUE_PREFIX, DeliveryJobData, deliveryJobOptions, JOBS, QUEUES } from "./jobs.js";
export type { HttpMetrics, MetricsRegistryOptions, ScrapeSources } from "./metrics.js";
export {
  boundedRead,
  Counter,
  createBatchMetrics,
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
export type { AddressVerdict, Resolver, TargetRules, UrlVerdict } from "./net.js";
export {
  checkWebhookUrl,
  classifyAddress,
  createSafeLookup,
  isIpLiteral,
  systemResolver,
  TargetRefused,
} from "./net.js";
export type { JsonObject, SchemaSide } from "./openapi.js";
export {
  componentSchemas,
  ERROR_COMPONENT,
  errorResponse,
  jsonContent,
  schemaRef,
  toJsonSchema,
} from "./openapi.js";
export { ServerCount, ShardCounts, StatsBody, StatsResponse } from "./stats.js";
export { charLength } from "./text.js";
export { TimeoutError, withTimeout } from "./timeout.js";
export {
  CastVoteBody,
  CastVoteResponse,
  CheckQuery,
  clampLimit,
  VOTE_WINDOW_MS,
  VOTES_LIMIT,
  VoteCheckResult,
  VoteConflict,
  VoteEntry,
  VotesQuery,
  VotesResponse,
} from "./votes.js";
export {
  WEBHOOK_EVENT,
  WEBHOOK_HEADERS,
  WEBHOOK_MAX_ATTEMPTS,
  WEBHOOK_RETRY_DELAYS_MS,
  WEBHOOK_TIMEOUT_MS,
  WEBHOOK_USER_AGENT,
  WebhookPayload,
} from "./webhook.js";
