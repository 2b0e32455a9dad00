/**
 * The OpenAPI 3.1 description of vote-ingest's internal listener (votes, listing management,
 * health, metrics), generated from zod schemas with the helpers of @botdir/schema. A test checks
 * that every route of the app is described here and nothing else, that every status it observes is
 * documented, and that real responses validate against the documented schemas.
 */
import {
  BotId,
  CastVoteBody,
  CastVoteResponse,
  conflictHeaders,
  conflictResponse,
  DELIVERY_MESSAGES,
  ErrorBody,
  errorResponse,
  HealthBody,
  type JsonObject,
  jsonContent,
  openApiDocument,
  RECOVERY_MAX_AGE_DAYS,
  RECOVERY_MESSAGES,
  schemaRef,
  toJsonSchema,
  VoteConflict,
  WEBHOOK_EVENTS,
} from "@botdir/schema";
import {
  CreateBotBody,
  DeliveryAttemptsResponse,
  EnableWebhookBody,
  Listing,
  BotSummary as ListingSummary,
  RecoverBody,
  RecoverResponse,
  RecoveryResponse,
  RedeliverResponse,
  SecretRotatedResponse,
  SetWebhookBody,
  SetWebhookEventsBody,
  TestEventBody,
  TestEventResponse,
  TokenResponse,
  WebhookClearedResponse,
  WebhookEnabledResponse,
  WebhookEventsResponse,
  WebhookSetResponse,
} from "../schemas.js";
import { ATTEMPTS_SHOWN } from "./listings.js";

const noStore = { "Cache-Control": { schema: { type: "string", const: "no-store" } } };

const BAD_ID =
  "The bot id is not an application id (`The bot id must be a bot application id (17 to 19 digits).`)";
const STRAY_BODY =
  "A JSON body sent anyway is still read: unparsable JSON is a 400 `Invalid JSON body.`, more than 16 kB a 413.";

/** Descriptions of the statuses every keyed endpoint shares; operations add their own sentences. */
const COMMON: Record<number, string> = {
  401: "Missing or wrong internal key: `Invalid internal API key.` Checked before the body is read.",
  500: "PostgreSQL failed; nothing was changed and the call can be retried: `The request could not be completed; retry with backoff.`",
};

type Errors = Record<number, string | JsonObject>;

function errors(entries: Errors): JsonObject {
  return Object.fromEntries(
    Object.entries(entries).map(([status, value]) => [
      status,
      typeof value === "string" ? errorResponse(value) : value,
    ]),
  );
}

const idParam = {
  name: "id",
  in: "path",
  required: true,
  description: "The bot's application id. An invalid id is a 400 naming it (not a 404).",
  schema: toJsonSchema(BotId, "input"),
};

const deliveryIdParam = {
  name: "deliveryId",
  in: "path",
  required: true,
  description: "The delivery id (X-Webhook-Delivery), as listed by GET …/webhook/deliveries.",
  schema: { type: "string" },
};

function ok(description: string, component: string, headers?: JsonObject): JsonObject {
  return { description, ...(headers ? { headers } : {}), content: jsonContent(schemaRef(component)) };
}

function keyed(input: {
  summary: string;
  description: string;
  withId: boolean;
  /** Path parameters after `id`. */
  more?: JsonObject[];
  body?: string;
  /** A request body that may be left out. */
  optionalBody?: string;
  success: [status: number, response: JsonObject];
  errors: Errors;
}): JsonObject {
  return {
    summary: input.summary,
    description: input.description,
    security: [{ internalKey: [] }],
    parameters: [...(input.withId ? [idParam] : []), ...(input.more ?? [])],
    ...(input.body ? { requestBody: { required: true, content: jsonContent(schemaRef(input.body)) } } : {}),
    ...(input.optionalBody
      ? { requestBody: { required: false, content: jsonContent(schemaRef(input.optionalBody)) } }
      : {}),
    responses: {
      [String(input.success[0])]: input.success[1],
      ...errors({ 401: COMMON[401]!, ...input.errors }),
    },
  };
}

/** The errors of a bot endpoint that takes no body: bad id, unknown bot, a stray body, PostgreSQL. */
const bodilessBotErrors = (extra: Errors = {}): Errors => ({
  400: `${BAD_ID}. ${STRAY_BODY}`,
  404: "`Bot not found.`",
  413: `A JSON body larger than 16 kB (this endpoint takes none). ${STRAY_BODY}`,
  500: COMMON[500]!,
  ...extra,
});

function buildPaths(): JsonObject {
  return {
    "/internal/v1/votes": {
      post: keyed({
        summary: "Cast a vote",
        description:
          "Records the vote once (12-hour window per user and bot) together with its webhook delivery, in one transaction, then hands the delivery to the dispatcher's queue. A vote is recorded even when Redis is down (the outbox relay hands it off later). `query`, the vote page's query string, is kept with the vote and sent in its vote.create. Extra body fields are ignored.",
        withId: false,
        body: "CastVoteBody",
        success: [
          201,
          ok(
            "Recorded; webhook delivery queued when the bot has a webhook URL.",
            "CastVoteResponse",
            noStore,
          ),
        ],
        errors: {
          400: "A missing or malformed id (`user_id must be a user id (17 to 20 digits).`), a `query` out of bounds (`query must be a flat JSON object of string values.`, `query must have at most 20 keys.`, `query must be at most 1024 bytes (keys and values, UTF-8).`), `Invalid JSON body.`, or `Content-Type must be application/json.`; names the first problem.",
          404: "`Bot not found.`: unknown bot, or a bot not approved yet.",
          409: {
            description:
              "The user voted for this bot less than 12 hours ago; nothing was written. `nextVoteAt` is when the window reopens.",
            headers: conflictHeaders("already_voted"),
            content: jsonContent(schemaRef("VoteConflict")),
          },
          413: "The body is larger than 4 kB: `The request body is too large.`",
          500: COMMON[500]!,
        },
      }),
    },
    "/internal/v1/bots": {
      post: keyed({
        summary: "Submit a bot",
        description:
          "Creates the listing, pending approval, or approved at once with `approve: true`. Unknown fields are refused.",
        withId: false,
        body: "CreateBotBody",
        success: [201, ok("Created.", "BotSummary")],
        errors: {
          400: "`id is required.`, `id must be a bot application id (17 to 19 digits).`, `The body has an unknown field: approved.`, `Invalid JSON body.` or `Content-Type must be application/json.`",
          409: conflictResponse(
            "`A bot with this id already exists.` The existing bot is not changed.",
            "bot_exists",
          ),
          413: "The body is larger than 16 kB: `The request body is too large.`",
          500: COMMON[500]!,
        },
      }),
    },
    "/internal/v1/bots/{id}": {
      get: keyed({
        summary: "Read the listing",
        description:
          "Everything the edit page shows: status, commands, server count, check-in time, webhook URL. Never the token or the webhook secret. Fields are null until set.",
        withId: true,
        success: [200, ok("The listing.", "Listing", noStore)],
        errors: bodilessBotErrors(),
      }),
    },
    "/internal/v1/bots/{id}/approve": {
      post: keyed({
        summary: "Approve a bot",
        description: "Approving an approved bot changes nothing (200, approval time kept).",
        withId: true,
        success: [200, ok("Approved.", "BotSummary")],
        errors: bodilessBotErrors(),
      }),
    },
    "/internal/v1/bots/{id}/token": {
      post: keyed({
        summary: "Generate an API token",
        description:
          "Returns a new token once; only its hash is stored. The previous token stops working at once, on every API replica.",
        withId: true,
        success: [200, ok("The new token, shown once.", "TokenResponse", noStore)],
        errors: bodilessBotErrors({
          409: conflictResponse(
            "`The bot is not approved yet; only approved bots get a token.`",
            "not_approved",
          ),
        }),
      }),
    },
    "/internal/v1/bots/{id}/webhook": {
      put: keyed({
        summary: "Set the vote webhook",
        description:
          "Stores the URL (https, public host; see docs/management.md for the refused spellings) and generates a new secret every time, also for an unchanged URL. A refused URL changes nothing.",
        withId: true,
        body: "SetWebhookBody",
        success: [200, ok("The stored URL and the new secret, shown once.", "WebhookSetResponse", noStore)],
        errors: {
          400: `${BAD_ID}, \`url is required.\`, \`url must be a string.\`, an unknown field, \`Invalid JSON body.\`, \`Content-Type must be application/json.\`, or a refused URL, e.g. \`The webhook URL must use https.\`, \`The webhook URL must name a public host (it points to a loopback address).\``,
          404: "`Bot not found.`",
          413: "The body is larger than 16 kB: `The request body is too large.`",
          500: COMMON[500]!,
          503: "SECRET_ENCRYPTION_KEY is not configured on this service, so the secret cannot be stored.",
        },
      }),
      delete: keyed({
        summary: "Clear the vote webhook",
        description:
          "Removes the URL and its secret. Idempotent. Votes cast afterwards queue no delivery; attempts already made stay listed.",
        withId: true,
        success: [200, ok("Cleared.", "WebhookClearedResponse")],
        errors: bodilessBotErrors(),
      }),
    },
    "/internal/v1/bots/{id}/webhook/events": {
      put: keyed({
        summary: "Choose the webhook's events",
        description: `The events the webhook receives from now on: ${WEBHOOK_EVENTS.join(", ")} (default [vote.create]). vote.create is sent for votes cast while subscribed; vote.available when a vote's 12-hour window ends, for votes cast while subscribed and only if still subscribed then. Repeats count once. Independent of the URL: setting or clearing it keeps the choice.`,
        withId: true,
        body: "SetWebhookEventsBody",
        success: [200, ok("The stored events.", "WebhookEventsResponse")],
        errors: {
          400: `${BAD_ID}, \`events is required.\`, \`events must name at least one event (${WEBHOOK_EVENTS.join(", ")}).\`, \`events[0] must be a known event (${WEBHOOK_EVENTS.join(", ")}).\`, an unknown field, \`Invalid JSON body.\`, or \`Content-Type must be application/json.\``,
          404: "`Bot not found.`",
          413: "The body is larger than 16 kB: `The request body is too large.`",
          500: COMMON[500]!,
        },
      }),
    },
    "/internal/v1/bots/{id}/webhook/deliveries": {
      get: keyed({
        summary: "The last delivery attempts",
        description: `The ${ATTEMPTS_SHOWN} newest webhook delivery attempts of the bot, newest first, across all its deliveries. \`{"attempts": []}\` when there are none.`,
        withId: true,
        success: [200, ok("The attempts.", "DeliveryAttemptsResponse", noStore)],
        errors: bodilessBotErrors(),
      }),
    },
    "/internal/v1/bots/{id}/webhook/deliveries/{deliveryId}/redeliver": {
      post: keyed({
        summary: "Redeliver a delivery",
        description:
          "Starts a fresh series of five attempts of a delivered or failed delivery: the same delivery id (X-Webhook-Delivery) and the same body bytes, so receivers de-duplicate it. The series is handed to the queue at once (or by the outbox relay within a second when Redis is unavailable). No body.",
        withId: true,
        more: [deliveryIdParam],
        success: [202, ok("The new series has started.", "RedeliverResponse", noStore)],
        errors: bodilessBotErrors({
          404: `\`Bot not found.\`, or \`${DELIVERY_MESSAGES.notFound}\`: no delivery with this id for this bot (also another bot's delivery, or an id that is not a UUID).`,
          409: conflictResponse(
            `\`${DELIVERY_MESSAGES.pending}\` or \`${DELIVERY_MESSAGES.noWebhook}\``,
            "delivery_pending",
            "no_webhook",
          ),
        }),
      }),
    },
    "/internal/v1/bots/{id}/webhook/recover": {
      post: keyed({
        summary: "Recover undelivered votes since a time",
        description: `Sends vote.create again for every vote cast in [since, until) whose delivery did not succeed: a delivery that ended failed (five attempts, or endpoint_disabled) and a vote recorded with no delivery (while the webhook was disabled). Delivered votes are not sent again; pending ones are left to their attempts. since may reach back ${RECOVERY_MAX_AGE_DAYS} days; until defaults to now. vote-ingest's recovery driver queues the votes in batches (docs/webhooks.md "Recovering undelivered votes").`,
        withId: true,
        body: "RecoverBody",
        success: [202, ok("The recovery has started.", "RecoverResponse", noStore)],
        errors: {
          400: `${BAD_ID}, \`since is required.\`, \`since must be an ISO 8601 date-time with a time zone within the last ${RECOVERY_MAX_AGE_DAYS} days.\`, \`until must be after since.\`, an unknown field, \`Invalid JSON body.\`, or \`Content-Type must be application/json.\``,
          404: "`Bot not found.`",
          409: conflictResponse(
            `\`${RECOVERY_MESSAGES.disabled}\`, \`${RECOVERY_MESSAGES.noWebhook}\`, or \`Recovery <id> over an overlapping window is still running.\``,
            "webhook_disabled",
            "no_webhook",
            "recovery_running",
          ),
          413: "The body is larger than 16 kB: `The request body is too large.`",
          500: COMMON[500]!,
        },
      }),
    },
    "/internal/v1/bots/{id}/webhook/recoveries/{recoveryId}": {
      get: keyed({
        summary: "A recovery's progress",
        description:
          "The counts of a recovery: queued (the votes it sends), delivered, failed, pending (neither yet), and its state (running, done, or stopped when the webhook was disabled or removed while it ran).",
        withId: true,
        more: [
          {
            name: "recoveryId",
            in: "path",
            required: true,
            description: "The id POST …/webhook/recover answered.",
            schema: { type: "string" },
          },
        ],
        success: [200, ok("The recovery.", "RecoveryResponse", noStore)],
        errors: bodilessBotErrors({ 404: `\`Bot not found.\`, or \`${RECOVERY_MESSAGES.notFound}\`` }),
      }),
    },
    "/internal/v1/bots/{id}/webhook/secret": {
      post: keyed({
        summary: "Rotate the webhook secret",
        description:
          "A new secret, shown once; the URL is unchanged. For WEBHOOK_SECRET_OVERLAP_MS (default 24 h) `webhook-signature` carries a `v1,` signature under the new and under the previous secret; `Authorization` and `X-Webhook-Signature-256` use the new one at once. Setting a URL (PUT …/webhook) instead gives a fresh secret with no overlap.",
        withId: true,
        success: [200, ok("The new secret, shown once.", "SecretRotatedResponse", noStore)],
        errors: bodilessBotErrors({
          409: conflictResponse(
            "`The bot has no webhook URL configured.`, or `The webhook changed meanwhile; retry the rotation.` (another rotation or a new URL won the race).",
            "no_webhook",
            "webhook_changed",
          ),
          503: "SECRET_ENCRYPTION_KEY is not configured on this service, so the secret cannot be stored.",
        }),
      }),
    },
    "/internal/v1/bots/{id}/webhook/test": {
      post: keyed({
        summary: "Send a test event",
        description:
          'One signed request to the configured URL now, `X-Webhook-Event: webhook.test`, body `{event: "webhook.test", bot_id, test: true, sent_at}`; with the optional body `{"event": "vote.create"}` or `{"event": "vote.available"}` that event\'s body for the sample user `000000000000000000`, with `test: true` at its end. Nothing enters the vote log. Same headers, timeout, no-redirect and SSRF rules as a delivery attempt. Listed in the attempt log with `test: true`. At most 5 per bot per minute.',
        withId: true,
        optionalBody: "TestEventBody",
        success: [
          200,
          ok("The outcome of the request (200 also when it failed).", "TestEventResponse", noStore),
        ],
        errors: bodilessBotErrors({
          400: `${BAD_ID}, \`event must be webhook.test, ${WEBHOOK_EVENTS.join(", ")}.\`, or \`The body must be a JSON object.\` ${STRAY_BODY}`,
          409: conflictResponse("`The bot has no webhook URL configured.`", "no_webhook"),
          429: "More than 5 test events in the last minute: `retryAfter` seconds until the next is allowed.",
          503: "SECRET_ENCRYPTION_KEY is not configured on this service, so the secret cannot be read.",
        }),
      }),
    },
    "/internal/v1/bots/{id}/webhook/enable": {
      post: keyed({
        summary: "Re-enable a disabled webhook",
        description:
          'Re-enables a webhook the dispatcher disabled: as dead (every attempt failed for WEBHOOK_DISABLE_AFTER_MS across WEBHOOK_DISABLE_MIN_DELIVERIES deliveries) or gone (its receiver answered 410 Gone); an active webhook stays active. Failures before now no longer count. An optional body `{"recoverSince": <ISO time>}` also recovers the votes since then (as POST …/webhook/recover) and answers the recovery.',
        withId: true,
        optionalBody: "EnableWebhookBody",
        success: [200, ok("The webhook is active.", "WebhookEnabledResponse")],
        errors: bodilessBotErrors({
          400: `${BAD_ID}; with recoverSince, a time a recovery refuses, in a sentence naming recoverSince (\`recoverSince must be an ISO 8601 date-time with a time zone within the last ${RECOVERY_MAX_AGE_DAYS} days.\`); nothing is changed. Unparsable JSON: \`Invalid JSON body.\``,
          409: conflictResponse(
            `\`The bot has no webhook URL configured.\` (nothing is changed); with recoverSince, once the webhook is enabled, a recovery that did not start: \`${RECOVERY_MESSAGES.noWebhook}\`, \`Recovery <id> over an overlapping window is still running.\`, or \`${RECOVERY_MESSAGES.disabled}\` (disabled again meanwhile)`,
            "no_webhook",
            "recovery_running",
            "webhook_disabled",
          ),
          413: "A JSON body larger than 16 kB: `The request body is too large.`",
        }),
      }),
    },
    "/internal/v1/openapi.json": {
      get: keyed({
        summary: "This document",
        description:
          "Requires the internal key like every other /internal/v1 endpoint: it describes internal endpoints only.",
        withId: false,
        success: [200, { description: "OpenAPI 3.1 document.", content: jsonContent({ type: "object" }) }],
        errors: {},
      }),
    },
    "/health": {
      get: {
        summary: "Health",
        description: "No credential. Checks PostgreSQL and Redis with short timeouts.",
        security: [],
        responses: {
          "200": ok("The service can serve.", "Health", noStore),
          "503": ok("A dependency is down; `error` names it.", "Health", noStore),
        },
      },
    },
    "/metrics": {
      get: {
        summary: "Prometheus metrics",
        description:
          "No credential (the listener is internal). Prometheus text format; reads of PostgreSQL and Redis are bounded, so a store that is down does not fail the scrape.",
        security: [],
        responses: {
          "200": {
            description: "The metrics.",
            headers: noStore,
            content: { "text/plain": { schema: { type: "string" } } },
          },
        },
      },
    },
  };
}

export function buildOpenApi(): JsonObject {
  return openApiDocument({
    title: "Bot Listing Directory: vote-ingest internal API",
    description:
      "The internal listener (INGEST_PORT): votes cast by the site and listing management for the edit page. Never expose it to the internet. Errors are the public API's body, `{error}` with one sentence. Another method on a known path is a 405 with an `Allow` header; an unknown path a 404 `No such endpoint.`",
    paths: buildPaths(),
    security: {
      scheme: "internalKey",
      description:
        "INTERNAL_API_KEY, bare or as `Bearer <key>`, compared in constant time. Held by the site frontend and operators only.",
    },
    schemas: {
      CastVoteBody: [CastVoteBody, "input"],
      CastVoteResponse: [CastVoteResponse, "output"],
      VoteConflict: [VoteConflict, "output"],
      CreateBotBody: [CreateBotBody, "input"],
      BotSummary: [ListingSummary, "output"],
      TokenResponse: [TokenResponse, "output"],
      SetWebhookBody: [SetWebhookBody, "input"],
      SetWebhookEventsBody: [SetWebhookEventsBody, "input"],
      WebhookEventsResponse: [WebhookEventsResponse, "output"],
      TestEventBody: [TestEventBody, "input"],
      WebhookSetResponse: [WebhookSetResponse, "output"],
      WebhookClearedResponse: [WebhookClearedResponse, "output"],
      DeliveryAttemptsResponse: [DeliveryAttemptsResponse, "output"],
      RedeliverResponse: [RedeliverResponse, "output"],
      RecoverBody: [RecoverBody, "input"],
      RecoverResponse: [RecoverResponse, "output"],
      RecoveryResponse: [RecoveryResponse, "output"],
      SecretRotatedResponse: [SecretRotatedResponse, "output"],
      TestEventResponse: [TestEventResponse, "output"],
      EnableWebhookBody: [EnableWebhookBody, "input"],
      WebhookEnabledResponse: [WebhookEnabledResponse, "output"],
      Listing: [Listing, "output"],
      Error: [ErrorBody, "output"],
      Health: [HealthBody, "output"],
    },
  });
}
