/** A non-2xx answer of the API: its status, the error sentence of its body, `retryAfter` on 429. */
export class ApiError extends Error {
  override readonly name = "ApiError";
  /** HTTP status code. */
  readonly status: number;
  /** Seconds until the rate-limit window resets; set on 429 only. */
  readonly retryAfter: number | undefined;
  /** The parsed JSON body, when there was one. */
  readonly body: unknown;
  /**
   * A 409's cause, from the `X-Botdir-Conflict` header (`delivery_pending`, `no_webhook`, …; see
   * the API reference); undefined for other statuses or when the answer did not name one.
   */
  readonly conflict: string | undefined;

  constructor(
    status: number,
    message: string,
    options: { retryAfter?: number; body?: unknown; conflict?: string } = {},
  ) {
    super(message);
    this.status = status;
    this.retryAfter = options.retryAfter;
    this.body = options.body;
    this.conflict = options.conflict;
  }
}

/**
 * A 2xx answer the client could not use: its body failed while it was read, is not JSON, or is not
 * the shape the call returns (a proxy's page, a cut connection). Idempotent calls retry it like a
 * network error before it is thrown; `redeliver` throws it at once (the redelivery may have started).
 */
export class InvalidResponseError extends Error {
  override readonly name = "InvalidResponseError";
  /** HTTP status code of the answer (2xx). */
  readonly status: number;

  constructor(status: number, message: string, options: { cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.status = status;
  }
}

/** Why `verifyWebhook` refused a request. */
export type WebhookVerificationReason =
  /** Neither Standard Webhooks headers (`webhook-id`, `-timestamp`, `-signature`) nor `X-Webhook-Signature-256`. */
  | "missing_signature"
  /** `webhook-timestamp` is not Unix seconds. */
  | "malformed_timestamp"
  /** `webhook-timestamp` is further from this clock than the tolerance: a replay, or a skewed clock. */
  | "timestamp_out_of_tolerance"
  /** No signature matches any of the secrets: a changed body or a wrong secret. */
  | "invalid_signature"
  /** Legacy headers only, and `Authorization` is not one of the secrets. */
  | "invalid_authorization"
  /** The signature is valid but the body is not a JSON object. */
  | "invalid_body";

/** Thrown by `verifyWebhook`; `reason` says why (never the secret or the expected signature). */
export class WebhookVerificationError extends Error {
  override readonly name = "WebhookVerificationError";
  readonly reason: WebhookVerificationReason;

  constructor(reason: WebhookVerificationReason, message: string) {
    super(message);
    this.reason = reason;
  }
}
