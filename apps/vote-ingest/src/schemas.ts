/**
 * Request and response bodies of the listing-management endpoints (/internal/v1/bots), as zod
 * schemas. Requests are parsed with them; responses are described by them in the OpenAPI document
 * (services/openapi.ts), and the OpenAPI test validates real responses against that description.
 * The vote endpoint's bodies (CastVoteBody, CastVoteResponse, VoteConflict) live in @botdir/schema.
 */
import {
  BotId,
  Command,
  type DeliveryAttempt,
  RecoverResponse,
  VOTE_AVAILABLE_EVENT,
  WEBHOOK_EVENT,
  WEBHOOK_EVENTS,
} from "@botdir/schema";
import { z } from "zod";
import type { AttemptView, BotSummary as BotSummaryView, ListingView } from "./services/listings.js";
import type { TestOutcome } from "./services/webhook-test.js";

const Timestamp = z.iso.datetime().meta({ description: "ISO 8601 UTC with milliseconds." });

/** POST /internal/v1/bots. Unknown fields are refused, so a typo such as `aprove` cannot silently submit a pending bot. */
export const CreateBotBody = z.strictObject({
  id: BotId,
  approve: z.boolean().optional().meta({ description: "Approve at once (default false: pending)." }),
});

/** PUT /internal/v1/bots/:id/webhook. */
export const SetWebhookBody = z.strictObject({
  url: z.string().meta({ description: "https URL naming a public host, at most 2048 characters." }),
});

const KNOWN_EVENTS = WEBHOOK_EVENTS.join(", ");

/** An event a webhook can subscribe to; another name is a 400 listing the known ones. */
export const WebhookEvent = z.enum(WEBHOOK_EVENTS, {
  error: () => `must be a known event (${KNOWN_EVENTS})`,
});

/** PUT /internal/v1/bots/:id/webhook/events: the events the webhook receives from now on. */
export const SetWebhookEventsBody = z.strictObject({
  events: z
    .array(WebhookEvent)
    .min(1, `must name at least one event (${KNOWN_EVENTS})`)
    .max(16, "must name at most 16 events")
    .meta({ description: `The events to send: ${KNOWN_EVENTS}. Repeats count once.` }),
});

/** Answer of setting the events: the stored set, in the order of the known events. */
export const WebhookEventsResponse = z.object({ id: BotId, events: z.array(WebhookEvent) });

/** The optional body of POST …/webhook/test: which event to send (default webhook.test). */
export const TestEventBody = z.object({
  event: z
    .enum(["webhook.test", WEBHOOK_EVENT, VOTE_AVAILABLE_EVENT], {
      error: () => `must be webhook.test, ${KNOWN_EVENTS}`,
    })
    .optional()
    .meta({
      description:
        "webhook.test (default); vote.create or vote.available send a sample of that event's body with `test: true` and a sample user.",
    }),
});

export const BotStatus = z.enum(["pending", "approved"]);

/** Answer of submit and approve. */
export const BotSummary = z.object({ id: BotId, status: BotStatus });

/** Answer of token generation: the token, shown once. */
export const TokenResponse = z.object({
  id: BotId,
  token: z
    .string()
    .regex(/^[\w-]{43}$/)
    .meta({ description: "32 CSPRNG bytes, base64url; shown once, stored only as a hash." }),
});

/** Answer of setting the webhook: the stored (normalised) URL and a new secret, shown once. */
export const WebhookSetResponse = z.object({
  id: BotId,
  url: z.string(),
  secret: z
    .string()
    .regex(/^whsec_[0-9a-f]{64}$/)
    .meta({
      description: "New on every set; the Authorization value and HMAC key of the webhook requests.",
    }),
});

/** Answer of rotating the webhook secret: the new secret, shown once. */
export const SecretRotatedResponse = z.object({
  id: BotId,
  secret: z
    .string()
    .regex(/^whsec_[0-9a-f]{64}$/)
    .meta({
      description:
        "The new secret, shown once. The previous one keeps signing webhook-signature beside it for WEBHOOK_SECRET_OVERLAP_MS.",
    }),
});

export const WebhookState = z.enum(["active", "disabled"]);

/** The optional body of POST …/webhook/enable: recover the votes since then as well. */
export const EnableWebhookBody = z.object({
  recoverSince: z.string().optional().meta({
    description:
      "Also recover the votes cast since then (as POST …/webhook/recover with this since and no until): an ISO 8601 date-time with a time zone within the recovery window. Other fields are ignored.",
  }),
});

/** Answer of re-enabling the webhook. */
export const WebhookEnabledResponse = z.object({
  id: BotId,
  state: WebhookState,
  recovery: RecoverResponse.optional().meta({ description: "With recoverSince: the recovery started." }),
});

/** Answer of a test event: the outcome of its one request. */
export const TestEventResponse = z.object({
  delivered: z.boolean().meta({ description: "True when the receiver answered 2xx." }),
  statusCode: z.number().int().nullable(),
  errorKind: z.string().nullable().meta({
    description:
      "null when delivered; otherwise http_status, timeout, connection, redirect, tls, dns, refused_target.",
  }),
  durationMs: z.number().int().min(0),
});

/** Answer of clearing the webhook. */
export const WebhookClearedResponse = z.object({ id: BotId, url: z.null() });

/** The attempt log and the redelivery answer are the public API's too (@botdir/schema). */
export {
  DeliveryAttempt,
  DeliveryAttemptsResponse,
  RecoverBody,
  RecoverResponse,
  RecoveryResponse,
  RedeliverResponse,
} from "@botdir/schema";

/** GET /internal/v1/bots/:id: the listing as the edit page shows it; never the token or the secret. */
export const Listing = z.object({
  id: BotId,
  status: BotStatus,
  approved: z.boolean(),
  approved_at: Timestamp.nullable(),
  commands: z.array(Command).meta({ description: "As the bot last pushed them; [] until then." }),
  server_count: z.number().int().min(0).nullable(),
  checked_in_at: Timestamp.nullable(),
  webhook_url: z.string().nullable(),
  webhook_state: WebhookState.nullable().meta({
    description:
      "null without a URL; disabled when every attempt failed for WEBHOOK_DISABLE_AFTER_MS, or at once after a 410 Gone answer.",
  }),
  webhook_disabled_reason: z.string().nullable().meta({
    description:
      "Why the webhook was disabled: dead_endpoint, or gone (the receiver answered 410); null while active.",
  }),
  webhook_disabled_at: Timestamp.nullable(),
  webhook_events: z.array(WebhookEvent).meta({
    description: "The events the webhook receives (PUT …/webhook/events); default [vote.create].",
  }),
  has_token: z.boolean(),
  token_created_at: Timestamp.nullable(),
  created_at: Timestamp,
});

/* Compile-time guards: the schemas describe exactly what the service module returns. */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Assert<T extends true> = T;
/** Does not compile when a schema and the service's type drift apart. */
export type SchemaMatchesService = [
  Assert<Same<z.output<typeof BotSummary>, BotSummaryView>>,
  Assert<Same<z.output<typeof DeliveryAttempt>, AttemptView>>,
  Assert<Same<z.output<typeof TestEventResponse>, TestOutcome>>,
  // The service types `commands` as the stored JSON (unknown); everything else must match.
  Assert<Same<Omit<z.output<typeof Listing>, "commands">, Omit<ListingView, "commands">>>,
];
