/**
 * The webhook attempt log and manual redelivery as owners see them: the edit page (vote-ingest's
 * internal endpoints) and the public API (`/api/v1/bots/{id}/webhook/deliveries`) answer the same
 * bodies.
 */
import { z } from "zod";
import { ApiError } from "./errors.js";
import { WebhookEventName } from "./webhook.js";

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
  event: WebhookEventName.nullable().meta({
    description:
      "The event the delivery carries (X-Webhook-Event): vote.create (a vote was cast) or vote.available (its 12-hour window ended). null for a test event (test true), whose kind is not recorded.",
  }),
  recovered: z.boolean().meta({
    description: "True for an attempt of the series a recovery (POST …/webhook/recover) started.",
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

/** How far back a recovery may reach (days); @botdir/db's RECOVERY_MAX_AGE_MS. */
export const RECOVERY_MAX_AGE_DAYS = 14;

const RECOVER_TIME = `an ISO 8601 date-time with a time zone within the last ${RECOVERY_MAX_AGE_DAYS} days`;

/** Body of a recovery: the window [since, until) of the votes to send again; until defaults to now. */
export const RecoverBody = z
  .object({
    since: z.string().meta({ description: `Start of the window (inclusive): ${RECOVER_TIME}.` }),
    until: z.string().optional().meta({
      description: "End of the window (exclusive), after since; default now (a later time counts as now).",
    }),
  })
  .meta({ description: "The window of votes to recover, by the time they were cast." });
export type RecoverBody = z.infer<typeof RecoverBody>;

const ZONED = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/i;

/**
 * The window of a recovery body, or an ApiError (400) naming the first problem in one sentence:
 * since within the last RECOVERY_MAX_AGE_DAYS days and not in the future, until after since (a
 * later until than now counts as now).
 */
export function parseRecoverWindow(body: unknown, now: Date): { since: Date; until: Date } {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new ApiError("bad_request", "The body must be a JSON object with since.");
  }
  const fields = body as Record<string, unknown>;
  const unknown = Object.keys(fields).find((k) => k !== "since" && k !== "until");
  if (unknown !== undefined)
    throw new ApiError("bad_request", `Unknown field ${JSON.stringify(unknown).slice(0, 40)}.`);
  const since = instant(fields.since, "since", true);
  const until = fields.until === undefined ? now : instant(fields.until, "until", false);
  withinRecoveryAge(since, now, "since");
  const end = until.getTime() > now.getTime() ? now : until;
  if (end.getTime() <= since.getTime()) throw new ApiError("bad_request", "until must be after since.");
  return { since, until: end };
}

/**
 * The window [value, now) of a recovery started from a single time sent under another field name
 * (enable's recoverSince), or an ApiError (400) whose sentence names that field: the checks of a
 * recovery's since.
 */
export function parseRecoverSince(value: unknown, now: Date, field: string): { since: Date; until: Date } {
  const since = instant(value, field, true);
  withinRecoveryAge(since, now, field);
  return { since, until: now };
}

function withinRecoveryAge(since: Date, now: Date, name: string): void {
  const earliest = now.getTime() - RECOVERY_MAX_AGE_DAYS * 24 * 60 * 60 * 1000;
  if (since.getTime() < earliest || since.getTime() >= now.getTime()) {
    throw new ApiError("bad_request", `${name} must be ${RECOVER_TIME}.`);
  }
}

function instant(value: unknown, name: string, required: boolean): Date {
  if (value === undefined && required) throw new ApiError("bad_request", `${name} is required.`);
  const ms = typeof value === "string" && ZONED.test(value) ? Date.parse(value) : Number.NaN;
  if (Number.isNaN(ms)) throw new ApiError("bad_request", `${name} must be ${RECOVER_TIME}.`);
  return new Date(ms);
}

export const RecoveryState = z.enum(["running", "done", "stopped"]).meta({
  description:
    "running (votes left to queue, or deliveries pending), done, or stopped (the webhook was disabled or removed while it ran; the votes it had not queued were not sent).",
});

/** Answer of POST …/webhook/recover (202). */
export const RecoverResponse = z.object({
  recoveryId: z.uuid().meta({ description: "Read its progress at …/webhook/recoveries/{recoveryId}." }),
  queued: z.number().int().min(0).meta({ description: "Votes the recovery sends again." }),
});
export type RecoverResponse = z.infer<typeof RecoverResponse>;

/** GET …/webhook/recoveries/{recoveryId}. */
export const RecoveryResponse = z.object({
  recoveryId: z.uuid(),
  state: RecoveryState,
  since: Timestamp,
  until: Timestamp,
  queued: z
    .number()
    .int()
    .min(0)
    .meta({ description: "Votes the recovery sends (what it queued, once it ended)." }),
  delivered: z.number().int().min(0),
  failed: z.number().int().min(0).meta({ description: "Recovered deliveries whose five attempts failed." }),
  pending: z.number().int().min(0).meta({ description: "Neither delivered nor failed yet." }),
  createdAt: Timestamp,
  finishedAt: Timestamp.nullable(),
});
export type RecoveryResponse = z.infer<typeof RecoveryResponse>;

export const RECOVERY_MESSAGES = {
  notFound: "Recovery not found.",
  disabled: "The webhook is disabled; enable it first (recoverSince on enable does both).",
  noWebhook: "The bot has no webhook URL; set one before recovering.",
} as const;

/** The 409 of a recovery over a window overlapping one still running: names the running one. */
export function recoveryRunning(recoveryId: string): ApiError {
  return ApiError.conflict(
    "recovery_running",
    `Recovery ${recoveryId} over an overlapping window is still running.`,
  );
}

/** The answer to a recovery that did not start, identical in every app. */
export function recoveryRefusal(
  result: { kind: "no_webhook" } | { kind: "disabled" } | { kind: "running"; recoveryId: string },
): ApiError {
  switch (result.kind) {
    case "no_webhook":
      return ApiError.conflict("no_webhook", RECOVERY_MESSAGES.noWebhook);
    case "disabled":
      return ApiError.conflict("webhook_disabled", RECOVERY_MESSAGES.disabled);
    case "running":
      return recoveryRunning(result.recoveryId);
  }
}
