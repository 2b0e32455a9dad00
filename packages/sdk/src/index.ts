export type {
  NodeRequestLike,
  NodeResponseLike,
  SeenStore,
  VoteDelivery,
  WebhookReceiverOptions,
} from "./adapters.js";
export {
  DEFAULT_HANDLER_TIMEOUT_MS,
  DEFAULT_MAX_BODY_BYTES,
  expressWebhook,
  fetchWebhook,
  memorySeenStore,
  nodeWebhook,
} from "./adapters.js";
export type { Autoposter, AutoposterOptions } from "./autoposter.js";
export { DEFAULT_AUTOPOST_INTERVAL_MS, MIN_AUTOPOST_INTERVAL_MS, startAutoposter } from "./autoposter.js";
export type { BotDirClientOptions, StatsInput } from "./client.js";
export { BotDirClient } from "./client.js";
// Every type of contract.ts is public: the API's bodies as the SDK's types.
export type * from "./contract.js";
export type { WebhookVerificationReason } from "./errors.js";
export { ApiError, InvalidResponseError, WebhookVerificationError } from "./errors.js";
export type { RetryOptions } from "./retry.js";
export { DEFAULT_RETRY } from "./retry.js";
export type {
  VerifiedWebhook,
  VerifyWebhookOptions,
  WebhookEvent,
  WebhookHeaders,
  WebhookTestEvent,
} from "./webhook.js";
export { DEFAULT_TOLERANCE_SECONDS, verifyWebhook } from "./webhook.js";
