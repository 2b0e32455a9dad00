/**
 * Request and response bodies of the listing-management endpoints (/internal/v1/bots), as zod
 * schemas. Requests are parsed with them; responses are described by them in the OpenAPI document
 * (services/openapi.ts), and the OpenAPI test validates real responses against that description.
 * The vote endpoint's bodies (CastVoteBody, CastVoteResponse, VoteConflict) live in @botdir/schema.
 */
import { BotId, Command } from "@botdir/schema";
import { z } from "zod";
import {
  ATTEMPTS_SHOWN,
  type AttemptView,
  type BotSummary as BotSummaryView,
  type ListingView,
} from "./services/listings.js";

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

/** Answer of clearing the webhook. */
export const WebhookClearedResponse = z.object({ id: BotId, url: z.null() });

export const AttemptOutcome = z.enum(["delivered", "failed", "retrying"]).meta({
  description:
    "State of the attempt's delivery now: delivered, failed (five attempts failed, no more follow) or retrying (pending).",
});

export const DeliveryAttempt = z.object({
  deliveryId: z
    .uuid()
    .meta({ description: "The delivery (X-Webhook-Delivery), constant across its retries." }),
  attempt: z.number().int().min(1).meta({ description: "Attempt number within the delivery, 1 to 5." }),
  statusCode: z
    .number()
    .int()
    .nullable()
    .meta({ description: "HTTP status received; null when none came back." }),
  errorKind: z.string().nullable().meta({
    description:
      "null when the attempt succeeded; otherwise why it failed (http_status, timeout, connection, redirect, tls, refused_target, ...).",
  }),
  outcome: AttemptOutcome,
  attemptedAt: Timestamp,
});

/** GET /internal/v1/bots/:id/webhook/deliveries: the last ten attempts, newest first. */
export const DeliveryAttemptsResponse = z.object({ attempts: z.array(DeliveryAttempt).max(ATTEMPTS_SHOWN) });

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
  // The service types `commands` as the stored JSON (unknown); everything else must match.
  Assert<Same<Omit<z.output<typeof Listing>, "commands">, Omit<ListingView, "commands">>>,
];
