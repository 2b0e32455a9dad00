/**
 * The OpenAPI 3.1 description of the public API, generated from the zod schemas of
 * @botdir/schema with zod's own z.toJSONSchema (OpenAPI 3.1 schemas are JSON Schema 2020-12).
 * A test checks that every route of the router is described here and nothing else.
 */
import {
  BotId,
  COMMAND_LIMITS,
  CommandsBody,
  CommandsPostBody,
  CommandsResponse,
  type ConflictCause,
  conflictResponse,
  DELIVERY_MESSAGES,
  DeliveryAttemptsResponse,
  ERROR_COMPONENT,
  ErrorBody,
  errorResponse,
  HealthBody,
  type JsonObject,
  jsonContent as json,
  toJsonSchema as jsonSchema,
  MESSAGES,
  openApiDocument,
  RECOVERY_MAX_AGE_DAYS,
  RECOVERY_MESSAGES,
  RecoverBody,
  RecoverResponse,
  RecoveryResponse,
  RedeliverResponse,
  schemaRef as ref,
  StatsBody,
  StatsResponse,
  UserId,
  VOTE_AVAILABLE_EVENT,
  VOTE_CURSOR_MAX_LENGTH,
  VOTE_CURSOR_SETTLE_MS,
  VOTES_LIMIT,
  VoteAvailablePayload,
  VoteCheckResult,
  VotesPage,
  WEBHOOK_EVENT,
  WEBHOOK_HEADERS,
  WEBHOOK_MAX_ATTEMPTS,
  WEBHOOK_TIMEOUT_MS,
  WEBHOOK_USER_AGENT,
  WebhookPayload,
} from "@botdir/schema";
import { SERVER_ERROR_RETRY_AFTER_SECONDS } from "@botdir/service-kit";
import { OVERLOADED_MESSAGE } from "../http/flood-budget.js";
import { WIDGET_ERROR_CACHE_SECONDS, WIDGET_QUERY_TIMEOUT_MS } from "../routes/widget.js";
import { DEFAULT_LIMITS, type LimitedEndpoint, WINDOW_SECONDS } from "./ratelimit.js";
import { CURSOR_MESSAGES, encodeVoteCursor } from "./vote-cursor.js";

const rateHeaders = {
  "RateLimit-Limit": { description: "Requests allowed per window.", schema: { type: "integer" } },
  "RateLimit-Remaining": {
    description: "Requests left in the current window (absent when the limiter failed open).",
    schema: { type: "integer" },
  },
  "RateLimit-Reset": {
    description: "Seconds until the window resets (absent when the limiter failed open).",
    schema: { type: "integer" },
  },
  "RateLimit-Policy": { description: `\`<limit>;w=${WINDOW_SECONDS}\``, schema: { type: "string" } },
};

/** `response` (a response object with one JSON content) with `example` as its example body. */
function withExample(response: JsonObject, example: unknown): JsonObject {
  const content = response.content as Record<string, JsonObject>;
  const [type, media] = Object.entries(content)[0] ?? [];
  return type === undefined ? response : { ...response, content: { [type]: { ...media, example } } };
}

/** The error body each shared status answers with (the spec's sentences). */
const ERROR_EXAMPLES: Record<number, JsonObject> = {
  400: { error: "commands[1].name must be 1 to 32 characters long." },
  401: { error: MESSAGES.invalidToken },
  404: { error: MESSAGES.botNotFound },
  409: { error: DELIVERY_MESSAGES.pending },
  413: { error: MESSAGES.bodyTooLarge },
  429: { error: MESSAGES.rateLimited, retryAfter: 42 },
  500: { error: MESSAGES.internal },
  503: { error: OVERLOADED_MESSAGE },
};

const retryAfter = {
  "Retry-After": {
    description: `Seconds to wait before retrying (${SERVER_ERROR_RETRY_AFTER_SECONDS} on every 5xx).`,
    schema: { type: "integer" },
  },
};

function authenticatedErrors(statuses: number[]): JsonObject {
  const all: Record<number, JsonObject> = {
    400: errorResponse(
      "Invalid JSON, a wrong content type or a value out of bounds; names the first problem.",
    ),
    401: errorResponse("Authorization missing, unreadable, or the token is unknown (or was replaced)."),
    404: errorResponse(
      "The bot does not exist, the token belongs to another bot, or the id is not an application id (one identical body).",
    ),
    413: errorResponse("The body is larger than the limit (1 MB for commands, 16 kB for stats)."),
    429: errorResponse("Rate limit exceeded; `retryAfter` (seconds) in the body.", {
      "Retry-After": { schema: { type: "integer" } },
      ...rateHeaders,
    }),
    500: errorResponse(
      "The request was valid but could not be completed (e.g. PostgreSQL unreachable); retry after `Retry-After` seconds, with backoff.",
      { "Retry-After": { schema: { type: "integer" } } },
    ),
    503: errorResponse(
      "Shed by the flood budget, before any I/O: the token is one this API process's token set does not hold (unknown, or issued moments ago), whose 401 waits for PostgreSQL, and too many such requests are waiting already or the process is overloaded (its event loop lags). A token the set holds is never shed. Retry after `Retry-After` seconds.",
      retryAfter,
    ),
  };
  return Object.fromEntries(
    statuses.map((status) => [String(status), withExample(all[status] ?? {}, ERROR_EXAMPLES[status])]),
  );
}

const idParam = {
  name: "id",
  in: "path",
  required: true,
  description: "The bot's application id; it must be the bot that owns the token.",
  schema: jsonSchema(BotId, "input"),
};

interface OperationInput {
  summary: string;
  description: string;
  endpoint: LimitedEndpoint;
  withId: boolean;
  parameters?: JsonObject[];
  body?: string;
  response: string;
  /** The success status (default 200). */
  status?: number;
  errors: number[];
  /** Descriptions that replace the shared ones for this operation, by status. */
  errorNotes?: Record<number, string>;
  /** The X-Botdir-Conflict causes of the 409 note (default: a redelivery's). */
  conflicts?: ConflictCause[];
  /** Error sentences that replace the shared examples for this operation, by status. */
  errorExamples?: Record<number, string>;
  /** An example request body (with `body`) and success body. */
  examples: { request?: unknown; response: unknown };
}

function operation(input: OperationInput): JsonObject {
  const responses: Record<string, JsonObject> = {
    [String(input.status ?? 200)]: withExample(
      { description: "OK", headers: rateHeaders, content: json(ref(input.response)) },
      input.examples.response,
    ),
    ...(authenticatedErrors(input.errors) as Record<string, JsonObject>),
  };
  for (const [status, text] of Object.entries(input.errorNotes ?? {})) {
    const response =
      status === "409"
        ? conflictResponse(text, ...(input.conflicts ?? ["delivery_pending", "no_webhook"]))
        : errorResponse(text);
    responses[status] = withExample(response, ERROR_EXAMPLES[Number(status)]);
  }
  for (const [status, sentence] of Object.entries(input.errorExamples ?? {})) {
    const response = responses[status];
    if (response) responses[status] = withExample(response, { error: sentence });
  }
  return {
    summary: input.summary,
    description: `${input.description}\n\nRate limit: ${DEFAULT_LIMITS[input.endpoint]} requests per token per minute.`,
    security: [{ botToken: [] }],
    parameters: [...(input.withId ? [idParam] : []), ...(input.parameters ?? [])],
    ...(input.body
      ? {
          requestBody: withExample(
            { required: true, content: json(ref(input.body)) },
            input.examples.request,
          ),
        }
      : {}),
    responses,
  };
}

const userIdParam = {
  name: "userId",
  in: "query",
  required: true,
  description: "Chat-platform user id.",
  schema: jsonSchema(UserId, "input"),
};
const limitParam = {
  name: "limit",
  in: "query",
  required: false,
  description: `Number of votes, clamped to ${VOTES_LIMIT.min}..${VOTES_LIMIT.max}; a non-number means the default.`,
  schema: {
    type: "integer",
    minimum: VOTES_LIMIT.min,
    maximum: VOTES_LIMIT.max,
    default: VOTES_LIMIT.default,
  },
};

const sinceParam = {
  name: "since",
  in: "query",
  required: false,
  description:
    "Catching up: the votes at or after this instant, OLDEST first, paged with `nextCursor`. An ISO 8601 date-time with a time zone (`Z` or an offset), in the years 0001 to 9999 once converted to UTC.",
  schema: { type: "string", format: "date-time" },
  example: "2026-11-21T12:00:00.000Z",
};
const cursorParam = {
  name: "cursor",
  in: "query",
  required: false,
  description: `The \`nextCursor\` of the previous page (opaque, bound to the bot; another bot's cursor is a 400). With \`since\` too, both apply.`,
  schema: { type: "string", maxLength: VOTE_CURSOR_MAX_LENGTH },
};

const deliveryIdParam = {
  name: "deliveryId",
  in: "path",
  required: true,
  description: "A delivery id (`X-Webhook-Delivery`) of this bot, as listed by GET …/webhook/deliveries.",
  schema: { type: "string" },
};

const EXAMPLE_COMMANDS = [
  { name: "ping", description: "Checks the latency", type: 1 },
  {
    name: "rank",
    description: "Shows a member's rank",
    type: 1,
    options: [{ type: 6, name: "member", description: "Whose rank", required: false }],
  },
];
const EXAMPLE_DELIVERY_ID = "6fa459ea-ee8a-4ca4-894e-db77e160355e";

/**
 * An operation of the route with the bot's id and of its alias without it, for clients written for
 * top.gg that leave the id out (the bot is the token's): the same answers, described once.
 */
function withAlias(input: Omit<OperationInput, "withId">): { withId: JsonObject; alias: JsonObject } {
  return {
    withId: operation({ ...input, withId: true }),
    alias: operation({
      ...input,
      withId: false,
      summary: `${input.summary} (bot from the token)`,
      description:
        "Same as the route with an id, for clients written for top.gg (@top-gg/sdk v3, dblapi.js, topggpy) that leave the id out: the bot is the token's.",
    }),
  };
}

function buildPaths(): JsonObject {
  const commands = operation({
    summary: "Replace the command list",
    description: `Replaces the whole list (not a merge). At most ${COMMAND_LIMITS.maxCommands} commands; duplicate names are dropped, the first kept; \`count\` is the number kept.`,
    endpoint: "commands",
    withId: true,
    body: "CommandsBody",
    response: "CommandsResponse",
    errors: [400, 401, 404, 413, 429, 500, 503],
    examples: { request: { commands: EXAMPLE_COMMANDS }, response: { success: true, count: 2 } },
  });
  const commandsAlias = operation({
    summary: "Replace the command list (discordbotlist.com client spelling)",
    description:
      "The same as `PUT` (canonical): same limits, same answers, and the same rate-limit window, shared with `PUT`. The body is the platform's command array itself (as discordbotlist.com's client `postBotCommands` sends it) or `{commands: [...]}`.",
    endpoint: "commands",
    withId: true,
    body: "CommandsPostBody",
    response: "CommandsResponse",
    errors: [400, 401, 404, 413, 429, 500, 503],
    examples: { request: EXAMPLE_COMMANDS, response: { success: true, count: 2 } },
  });
  const stats = withAlias({
    summary: "Report the server count",
    description:
      "`server_count`, or its aliases `guilds` (discordbotlist.com) and `guildCount` (discord.bots.gg). `server_count` may be an array of per-shard counts, and a non-empty `shards` array is summed. A post with `shard_id` (or `shardId`) is that shard's count: the bot's count becomes the sum of its shards' latest counts, and a `shard_count` (or `shardCount`) drops the shards at or beyond it; a post without a shard id (or with a per-shard array) sets the total and clears the shard counts. `server_count` in the answer is the count posted. Other extra fields are ignored. The check-in time is written on every post.",
    endpoint: "stats",
    body: "StatsBody",
    response: "StatsResponse",
    errors: [400, 401, 404, 413, 429, 500, 503],
    errorExamples: { 400: "server_count must be a number." },
    examples: { request: { server_count: 1482 }, response: { success: true, server_count: 1482 } },
  });
  const check = withAlias({
    summary: "Check a user's vote",
    description:
      "Inside the 12-hour window: `voted` 1, `hasVoted` true, `votedAt`, `nextVoteAt` = votedAt + 12 h. Outside: `voted` 0, `hasVoted` false, both timestamps null.",
    endpoint: "check",
    parameters: [userIdParam],
    response: "VoteCheckResult",
    errors: [400, 401, 404, 429, 503],
    errorExamples: { 400: "userId is required." },
    examples: {
      response: {
        voted: 1,
        hasVoted: true,
        votedAt: "2026-11-21T09:15:30.789Z",
        nextVoteAt: "2026-11-21T21:15:30.789Z",
      },
    },
  });
  const votes = withAlias({
    summary: "List votes",
    description: `Without \`since\` and \`cursor\`: the newest \`limit\` votes, newest first, from the append-only vote log, and no \`nextCursor\`.\n\nWith \`since\` and/or \`cursor\` (catching up after downtime): the votes at or after \`since\` and after the cursor's vote (both apply when both are given), OLDEST first, \`limit\` per page (clamped ${VOTES_LIMIT.min}..${VOTES_LIMIT.max}, default ${VOTES_LIMIT.default}), with \`nextCursor\` while more follow (absent on the last page). A vote is listed this way once it is ${VOTE_CURSOR_SETTLE_MS / 1000} seconds old (late commits never fall behind a cursor); to poll later, pass the last \`voted_at\` received as \`since\` and skip the vote repeated at that instant. Each page is a keyset read of the log's index: its cost does not grow with the log.`,
    endpoint: "votes",
    parameters: [limitParam, sinceParam, cursorParam],
    response: "VotesPage",
    errors: [400, 401, 404, 429, 503],
    errorNotes: {
      400: "Only with `since` or `cursor`: `since` is not an ISO 8601 date-time with a time zone or lies outside the years 0001 to 9999 (UTC), the cursor is malformed, or it is another bot's.",
    },
    errorExamples: { 400: CURSOR_MESSAGES.foreign },
    examples: {
      response: {
        votes: [
          { user_id: "223456789012345678", voted_at: "2026-11-21T06:00:04.120Z" },
          { user_id: "323456789012345678", voted_at: "2026-11-21T06:02:51.007Z" },
        ],
        nextCursor: encodeVoteCursor({
          botId: "123456789012345678",
          votedAtMs: Date.parse("2026-11-21T06:02:51.007Z"),
          id: "4711",
        }),
      },
    },
  });
  const deliveries = operation({
    summary: "List webhook delivery attempts",
    description:
      "The bot's last ten webhook delivery attempts, newest first, across its deliveries: each with its own `outcome` (`delivered` on a 2xx, else `failed`) beside its delivery's `deliveryState` now (`pending`, `delivered`, `failed`), the `series` it belongs to (0, or n after the nth redelivery), the `traceId` its request carried as `X-Webhook-Trace`, and the `event` its delivery carries (`vote.create` or `vote.available`; null for a test event).",
    endpoint: "deliveries",
    withId: true,
    response: "DeliveryAttemptsResponse",
    errors: [401, 404, 429],
    examples: {
      response: {
        attempts: [
          {
            deliveryId: EXAMPLE_DELIVERY_ID,
            attempt: 2,
            series: 0,
            statusCode: 204,
            errorKind: null,
            outcome: "delivered",
            deliveryState: "delivered",
            attemptedAt: "2026-11-21T09:16:31.002Z",
            traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
            test: false,
            event: "vote.create",
            recovered: false,
          },
          {
            deliveryId: EXAMPLE_DELIVERY_ID,
            attempt: 1,
            series: 0,
            statusCode: 503,
            errorKind: "http_status",
            outcome: "failed",
            deliveryState: "delivered",
            attemptedAt: "2026-11-21T09:15:30.912Z",
            traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
            test: false,
            event: "vote.create",
            recovered: false,
          },
        ],
      },
    },
  });
  const redeliver = operation({
    summary: "Redeliver a webhook delivery",
    description:
      "Starts a fresh series of five attempts of a `delivered` or `failed` delivery, with the same `X-Webhook-Delivery` id and the same body bytes (receivers de-duplicate on the id). The first attempt follows within about a second. No body.",
    endpoint: "redeliver",
    withId: true,
    parameters: [deliveryIdParam],
    response: "RedeliverResponse",
    status: 202,
    errors: [401, 404, 429, 500],
    examples: { response: { deliveryId: EXAMPLE_DELIVERY_ID, state: "pending", series: 1 } },
    errorNotes: {
      404: `\`Bot not found.\` as on every endpoint, or \`${DELIVERY_MESSAGES.notFound}\`: no delivery with this id for this bot (one body for an unknown id, another bot's delivery and an id that is not a UUID).`,
      409: `\`${DELIVERY_MESSAGES.pending}\` or \`${DELIVERY_MESSAGES.noWebhook}\``,
    },
  });
  const recover = operation({
    summary: "Recover undelivered votes since a time",
    description: `Sends \`vote.create\` again for every vote cast in [\`since\`, \`until\`) whose delivery did not succeed: a delivery that ended \`failed\` (five attempts, or \`endpoint_disabled\`) and a vote recorded with no delivery (while the webhook was disabled). A delivered vote is not sent again; a pending one is left to its own attempts. Each keeps its delivery id (a vote without one gets a new id) and starts a new trace linked to its previous one; its attempts are marked \`recovered\` in the delivery log. \`since\` may reach back ${RECOVERY_MAX_AGE_DAYS} days; \`until\` defaults to now. The votes are queued in batches (a few hundred in flight); read the progress at …/webhook/recoveries/{recoveryId}.`,
    endpoint: "recover",
    withId: true,
    body: "RecoverBody",
    response: "RecoverResponse",
    status: 202,
    errors: [400, 401, 404, 429, 500],
    examples: {
      request: { since: "2026-11-20T00:00:00Z" },
      response: { recoveryId: "0f8d1c2e-4b5a-4c3d-9e8f-7a6b5c4d3e2f", queued: 5000 },
    },
    errorNotes: {
      409: `\`${RECOVERY_MESSAGES.disabled}\`, \`${RECOVERY_MESSAGES.noWebhook}\`, or \`Recovery <id> over an overlapping window is still running.\``,
    },
    conflicts: ["webhook_disabled", "no_webhook", "recovery_running"],
  });
  const recovery = operation({
    summary: "Read a recovery's progress",
    description:
      "The counts of a recovery started by POST …/webhook/recover: `queued` (the votes it sends), `delivered`, `failed` and `pending` (neither yet), and its `state` (`running`, `done`, or `stopped` when the webhook was disabled or removed while it ran).",
    endpoint: "deliveries",
    withId: true,
    parameters: [
      {
        name: "recoveryId",
        in: "path",
        required: true,
        description: "The id POST …/webhook/recover answered.",
        schema: { type: "string" },
      },
    ],
    response: "RecoveryResponse",
    errors: [401, 404, 429],
    examples: {
      response: {
        recoveryId: "0f8d1c2e-4b5a-4c3d-9e8f-7a6b5c4d3e2f",
        state: "running",
        since: "2026-11-20T00:00:00.000Z",
        until: "2026-11-21T09:15:30.000Z",
        queued: 5000,
        delivered: 4200,
        failed: 0,
        pending: 800,
        createdAt: "2026-11-21T09:15:30.000Z",
        finishedAt: null,
      },
    },
    errorNotes: {
      404: `\`Bot not found.\` as on every endpoint, or \`${RECOVERY_MESSAGES.notFound}\``,
    },
  });
  return {
    "/api/v1/bots/{id}/webhook/recover": { post: recover },
    "/api/v1/bots/{id}/webhook/recoveries/{recoveryId}": { get: recovery },
    "/api/v1/bots/{id}/commands": { put: commands, post: commandsAlias },
    "/api/v1/bots/{id}/webhook/deliveries": { get: deliveries },
    "/api/v1/bots/{id}/webhook/deliveries/{deliveryId}/redeliver": { post: redeliver },
    "/api/v1/bots/{id}/stats": { post: stats.withId },
    "/api/v1/bots/stats": { post: stats.alias },
    "/api/v1/bots/{id}/check": { get: check.withId },
    "/api/v1/bots/check": { get: check.alias },
    "/api/v1/bots/{id}/votes": { get: votes.withId },
    "/api/v1/bots/votes": { get: votes.alias },
    "/api/health": {
      get: {
        summary: "Health",
        description: "No credential. Checks PostgreSQL and Redis with short timeouts.",
        security: [],
        responses: {
          "200": withExample(
            { description: "The service can serve.", content: json(ref("Health")) },
            { status: "ok", checks: { postgres: "ok", redis: "ok" } },
          ),
          "503": withExample(
            { description: "A dependency is down; `error` names it.", content: json(ref("Health")) },
            {
              status: "unavailable",
              checks: { postgres: "ok", redis: "down" },
              error: "Redis is unreachable.",
            },
          ),
        },
      },
    },
    "/widget/{id}.svg": {
      get: {
        summary: "Badge",
        description:
          "Public SVG badge with the server count and the votes of the last 30 days; cached 5 minutes; no rate limit. An unknown or invalid id gets a neutral badge (still 200).",
        security: [],
        parameters: [{ ...idParam, description: "The bot's application id." }],
        responses: {
          "200": {
            description: "The badge.",
            headers: { "Cache-Control": { schema: { type: "string", const: "public, max-age=300" } } },
            content: { "image/svg+xml": { schema: { type: "string" } } },
          },
          "503": {
            description: `Either the "unavailable" badge (SVG, \`Cache-Control: public, max-age=${WIDGET_ERROR_CACHE_SECONDS}\`) when the counts could not be read (PostgreSQL failed or did not answer within ${WIDGET_QUERY_TIMEOUT_MS / 1000} s), never the badge of an unlisted bot; or, for an id this process does not hold in memory while the flood budget's widget class is spent (too many such badges being read, or the process overloaded), the error body \`${OVERLOADED_MESSAGE}\` (JSON, \`Cache-Control: no-store\`), answered before any I/O.`,
            headers: {
              "Cache-Control": {
                description: `\`public, max-age=${WIDGET_ERROR_CACHE_SECONDS}\` on the badge, \`no-store\` on the error body.`,
                schema: {
                  type: "string",
                  enum: [`public, max-age=${WIDGET_ERROR_CACHE_SECONDS}`, "no-store"],
                },
              },
              "Retry-After": {
                ...retryAfter["Retry-After"],
                description: "On the error body: seconds to wait before retrying.",
              },
            },
            content: {
              "image/svg+xml": { schema: { type: "string" } },
              "application/json": { schema: ref(ERROR_COMPONENT), example: ERROR_EXAMPLES[503] },
            },
          },
        },
      },
    },
    "/docs": {
      get: {
        summary: "API reference page",
        description:
          "This document rendered for reading (Redoc), served from this origin only, under a strict Content-Security-Policy; cached 5 minutes.",
        security: [],
        responses: {
          "200": { description: "The page.", content: { "text/html": { schema: { type: "string" } } } },
        },
      },
    },
    "/docs/assets/{file}": {
      get: {
        summary: "API reference page assets",
        description:
          "The renderer and its start-up script, named by a hash of their content (cached for a year); the page links them.",
        security: [],
        parameters: [{ name: "file", in: "path", required: true, schema: { type: "string" } }],
        responses: {
          "200": { description: "The file.", content: { "text/javascript": { schema: { type: "string" } } } },
          "404": withExample(errorResponse("No such file."), { error: MESSAGES.routeNotFound }),
        },
      },
    },
    "/api/v1/openapi.json": {
      get: {
        summary: "This document",
        security: [],
        responses: { "200": { description: "OpenAPI 3.1 document.", content: json({ type: "object" }) } },
      },
    },
  };
}

/** A header the webhook request carries. */
const webhookHeader = (name: string, description: string, example: string) => ({
  name,
  in: "header",
  required: true,
  description,
  schema: { type: "string" },
  example,
});

/** The headers every webhook request carries; `event` is its X-Webhook-Event. */
function webhookHeaders(event: string): JsonObject[] {
  return [
    webhookHeader("Authorization", "The webhook secret, verbatim.", "whsec_5c1f…"),
    webhookHeader(WEBHOOK_HEADERS.event, "The event name; switch on it.", event),
    webhookHeader(
      WEBHOOK_HEADERS.delivery,
      "Unique per delivery (each event of a vote has its own), the same on its retries and redeliveries.",
      "6fa459ea-ee8a-4ca4-894e-db77e160355e",
    ),
    webhookHeader(
      WEBHOOK_HEADERS.signature,
      "`sha256=` and the hex HMAC-SHA256 of the raw body, keyed with the webhook secret.",
      "sha256=3f0a…",
    ),
    webhookHeader(
      "webhook-id",
      "Standard Webhooks: the delivery id.",
      "6fa459ea-ee8a-4ca4-894e-db77e160355e",
    ),
    webhookHeader(
      "webhook-timestamp",
      "Standard Webhooks: seconds since the epoch, when signed.",
      "1795252530",
    ),
    webhookHeader(
      "webhook-signature",
      "Standard Webhooks: `v1,<base64>` signatures, space-separated (two while a rotated secret overlaps).",
      "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=",
    ),
    webhookHeader("User-Agent", "The service's agent.", WEBHOOK_USER_AGENT),
    {
      ...webhookHeader(
        WEBHOOK_HEADERS.trace,
        "The trace id (W3C, 32 lowercase hex) of the delivery: the same on its retries, new after a redelivery; the delivery log shows it as `traceId`. Quote it to support. Not signed.",
        "4bf92f3577b34da6a3ce929d0e0e4736",
      ),
      required: false,
    },
  ];
}

const WEBHOOK_RESPONSES = {
  "2XX": { description: "Received: the delivery is done (204 is used in the examples)." },
  "410": {
    description:
      "Gone: the endpoint is gone for good. The webhook is disabled at once (re-enabled by the listing's webhook enable or a new URL).",
  },
  default: {
    description: `Any other answer, a redirect, or no answer within ${WEBHOOK_TIMEOUT_MS / 1000} s: a failed attempt, retried on the schedule.`,
  },
};

const VERIFY = `Verify it before trusting it: the HMAC-SHA256 of the raw body bytes (not re-serialised JSON) with the webhook secret, compared in constant time, or the Standard Webhooks signature (\`webhook-signature\`, within 5 minutes of \`webhook-timestamp\`). Answer 2xx within ${WEBHOOK_TIMEOUT_MS / 1000} s, then do the work. The same delivery can arrive more than once: de-duplicate on \`X-Webhook-Delivery\`. Attempts: ${WEBHOOK_MAX_ATTEMPTS} in all, retried after 1 min, 5 min, 30 min and 2 h; redirects are not followed.`;

/** The events the service sends to the bot's webhook URL (OpenAPI 3.1 `webhooks`). */
function buildWebhooks(): JsonObject {
  const example: WebhookPayload = {
    event: WEBHOOK_EVENT,
    bot_id: "123456789012345678",
    user_id: "223456789012345678",
    voted_at: "2026-11-21T09:15:30.789Z",
  };
  const available: VoteAvailablePayload = {
    event: VOTE_AVAILABLE_EVENT,
    bot_id: "123456789012345678",
    user_id: "223456789012345678",
    voted_at: "2026-11-21T09:15:30.789Z",
    available_at: "2026-11-21T21:15:30.789Z",
  };
  return {
    [WEBHOOK_EVENT]: {
      post: {
        summary: "A vote was cast",
        description: `Sent to the bot's webhook URL for each vote while the webhook subscribes to vote.create (the default). ${VERIFY}`,
        security: [],
        parameters: webhookHeaders(WEBHOOK_EVENT),
        requestBody: withExample({ required: true, content: json(ref("WebhookPayload")) }, example),
        responses: WEBHOOK_RESPONSES,
      },
    },
    [VOTE_AVAILABLE_EVENT]: {
      post: {
        summary: "The user can vote again",
        description: `Sent once per vote, within seconds of its 12-hour window ending (\`available_at\`), when the webhook subscribed to vote.available when the vote was cast and still does then. Its own delivery id, not the vote.create's. ${VERIFY}`,
        security: [],
        parameters: webhookHeaders(VOTE_AVAILABLE_EVENT),
        requestBody: withExample({ required: true, content: json(ref("VoteAvailablePayload")) }, available),
        responses: WEBHOOK_RESPONSES,
      },
    },
  };
}

export function buildOpenApi(): JsonObject {
  return openApiDocument({
    title: "Bot Listing Directory API",
    description:
      "Publish a bot's commands and server count, check and list votes, and receive signed webhooks: `vote.create` for each vote, `vote.available` when a vote's window ends. Errors are `{error}` (+ `retryAfter` on 429). Readable at `GET /docs`.",
    paths: buildPaths(),
    webhooks: buildWebhooks(),
    security: {
      scheme: "botToken",
      description:
        "The bot's API token: bare, `Bearer <token>` or `Bot <token>` (scheme names case-insensitive).",
    },
    schemas: {
      CommandsBody: [CommandsBody, "input"],
      CommandsPostBody: [CommandsPostBody, "input"],
      CommandsResponse: [CommandsResponse, "output"],
      StatsBody: [StatsBody, "input"],
      StatsResponse: [StatsResponse, "output"],
      VoteCheckResult: [VoteCheckResult, "output"],
      VotesPage: [VotesPage, "output"],
      DeliveryAttemptsResponse: [DeliveryAttemptsResponse, "output"],
      RedeliverResponse: [RedeliverResponse, "output"],
      RecoverBody: [RecoverBody, "input"],
      RecoverResponse: [RecoverResponse, "output"],
      RecoveryResponse: [RecoveryResponse, "output"],
      Error: [ErrorBody, "output"],
      Health: [HealthBody, "output"],
      WebhookPayload: [WebhookPayload, "output"],
      VoteAvailablePayload: [VoteAvailablePayload, "output"],
    },
  });
}
