export {
  COMMAND_LIMITS,
  Command,
  CommandsBody,
  CommandsPostBody,
  CommandsResponse,
  dedupeCommands,
} from "./commands.js";
export {
  DELIVERY_ATTEMPTS_SHOWN,
  DELIVERY_MESSAGES,
  DeliveryAttempt,
  DeliveryAttemptsResponse,
  DeliveryState,
  parseRecoverSince,
  parseRecoverWindow,
  RECOVERY_MAX_AGE_DAYS,
  RECOVERY_MESSAGES,
  RecoverBody,
  RecoverResponse,
  RecoveryResponse,
  RecoveryState,
  RedeliverResponse,
  recoveryRefusal,
  recoveryRunning,
  redeliveryRefusal,
} from "./deliveries.js";
export type { ErrorBodyShape, ErrorCode } from "./errors.js";
export {
  ApiError,
  CONFLICT_CAUSES,
  CONFLICT_HEADER,
  type ConflictCause,
  describeIssue,
  ERROR_STATUS,
  ErrorBody,
  MESSAGES,
  parseOrThrow,
} from "./errors.js";
export { HealthBody } from "./health.js";
export { BotId, isBotId, USER_ID_PATTERN, UserId } from "./ids.js";
export type { DeliveryHandOff, JobDefinition, JobName } from "./jobs.js";
export {
  DEFAULT_QUEUE_PREFIX,
  DELIVERY_BATCH_MAX,
  DeliveryBatchJobData,
  DeliveryJobData,
  deliveryBatchJob,
  deliveryBatchJobOptions,
  deliveryJob,
  deliveryJobData,
  deliveryJobOptions,
  JOBS,
  QUEUES,
} from "./jobs.js";
export type { JsonObject, SchemaSide } from "./openapi.js";
export {
  conflictHeaders,
  conflictResponse,
  ERROR_COMPONENT,
  errorResponse,
  jsonContent,
  openApiDocument,
  schemaRef,
  toJsonSchema,
} from "./openapi.js";
export type { ShardReport } from "./stats.js";
export { MAX_SHARD_COUNT, ServerCount, ShardCounts, StatsBody, StatsResponse } from "./stats.js";
export { charLength } from "./text.js";
export {
  CastVoteBody,
  CastVoteResponse,
  CheckQuery,
  clampLimit,
  isVoteLogTime,
  VOTE_CURSOR_MAX_LENGTH,
  VOTE_CURSOR_SETTLE_MS,
  VOTE_QUERY_MAX_BYTES,
  VOTE_QUERY_MAX_KEYS,
  VOTE_TIME_RANGE,
  VOTE_WINDOW_MS,
  VOTES_LIMIT,
  VoteCheckResult,
  VoteConflict,
  VoteEntry,
  VoteQuery,
  VotesPage,
  VotesPageQuery,
  VotesQuery,
  VotesResponse,
} from "./votes.js";
export {
  DEFAULT_WEBHOOK_EVENTS,
  VOTE_AVAILABLE_EVENT,
  VoteAvailablePayload,
  WEBHOOK_EVENT,
  WEBHOOK_EVENTS,
  WEBHOOK_HEADERS,
  WEBHOOK_MAX_ATTEMPTS,
  WEBHOOK_RETRY_DELAYS_MS,
  WEBHOOK_TIMEOUT_MS,
  WEBHOOK_USER_AGENT,
  WebhookEventName,
  WebhookEventPayload,
  WebhookPayload,
} from "./webhook.js";
