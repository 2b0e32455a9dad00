/**
 * The webhook attempt log and manual redelivery as owners see them: the edit page (vote-ingest's
 * internal endpoints) and the public API (`/api/v1/bots/{id}/webhook/deliveries`) answer the same
 * bodies.
 */
import { z } from "zod";
import { ApiError } from "./errors.js";

/** The edit page and the public API list the last ten attempts. */
export const DELIVERY_ATTEMPTS_SHOWN = 10;

const Timestamp = z.iso.datetime().meta({ description: "ISO 8601 UTC with milliseconds." });

export const DeliveryState = z.enum(["pending", "delivered", "failed"]).meta({
  description:
    "The delivery's state now: pending (an attempt will follow), delivered, or failed (five attempts of its series failed; no more follow unless it is redelivered).",
});

export const DeliveryAttempt = z.object({
  deliveryId: z.uuid().meta({
    description: "The delivery (X-Webhook-Delivery), constant across its retries and redeliveries.",
  }),
  attempt: z.number().int().min(1).meta({ description: "Attempt number within its series, 1 to 5." }),
  series: z
    .number()
    .int()
    .min(0)
    .meta({ description: "0 for the delivery's original attempts, n after its nth manual redelivery." }),
  statusCode: z
    .number()
    .int()
    .nullable()
    .meta({ description: "HTTP status received; null when none came back." }),
  errorKind: z.string().nullable().meta({
    description:
      "null when the attempt succeeded; otherwise why it failed (http_status, timeout, connection, redirect, tls, refused_target, interrupted, ...).",
  }),
  outcome: z.enum(["delivered", "failed"]).meta({
    description: "This attempt's own outcome: delivered (a 2xx answer) or failed.",
  }),
  deliveryState: DeliveryState,
  attemptedAt: Timestamp,
  traceId: z
    .string()
    .regex(/^[0-9a-f]{32}$/)
    .nullable()
    .meta({
      description:
        "The trace the attempt belongs to (32 lowercase hex), as its request carried it in X-Webhook-Trace: quote it to support. One trace per vote across its retries; a redelivery starts a new one. null for attempts made before traces were recorded.",
    }),
  test: z.boolean().meta({
    description:
      "True for a test event (webhook.test): deliveryId is the test's webhook-id, attempt 1, series 0, deliveryState its outcome.",
  }),
});
export type DeliveryAttempt = z.infer<typeof DeliveryAttempt>;

/** The last ten attempts of a bot, newest first. */
export const DeliveryAttemptsResponse = z.object({
  attempts: z.array(DeliveryAttempt).max(DELIVERY_ATTEMPTS_SHOWN),
});
export type DeliveryAttemptsResponse = z.infer<typeof DeliveryAttemptsResponse>;

/** Answer of a redelivery: a fresh series of five attempts has started (state pending). */
export const RedeliverResponse = z.object({
  deliveryId: z.uuid(),
  state: DeliveryState,
  series: z
    .number()
    .int()
    .min(1)
    .meta({ description: "The series just started (1 for the first redelivery)." }),
});
export type RedeliverResponse = z.infer<typeof RedeliverResponse>;

/** Sentences of the redelivery endpoints, identical in both apps. */
export const DELIVERY_MESSAGES = {
  notFound: "Delivery not found.",
  pending: "The delivery is still pending; redeliver it once it is delivered or failed.",
  noWebhook: "The bot has no webhook URL; set one before redelivering.",
} as const;

/** The answer to a redelivery that did not start, identical in both apps: 404, or 409 with why. */
export function redeliveryRefusal(kind: "not_found" | "pending" | "no_webhook"): ApiError {
  switch (kind) {
    case "not_found":
      return new ApiError("not_found", DELIVERY_MESSAGES.notFound);
    case "pending":
      return ApiError.conflict("delivery_pending", DELIVERY_MESSAGES.pending);
    case "no_webhook":
      return ApiError.conflict("no_webhook", DELIVERY_MESSAGES.noWebhook);
  }
}
