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
  componentSchemas,
  DELIVERY_MESSAGES,
  DeliveryAttemptsResponse,
  ErrorBody,
  errorResponse,
  HealthBody,
  type JsonObject,
  jsonContent as json,
  toJsonSchema as jsonSchema,
  RedeliverResponse,
  schemaRef as ref,
  StatsBody,
  StatsResponse,
  UserId,
  VOTE_CURSOR_MAX_LENGTH,
  VOTE_CURSOR_SETTLE_MS,
  VOTES_LIMIT,
  VoteCheckResult,
  VotesPage,
} from "@botdir/schema";
import { DEFAULT_LIMITS, type LimitedEndpoint, WINDOW_SECONDS } from "./ratelimit.js";

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
  };
  return Object.fromEntries(statuses.map((status) => [String(status), all[status]]));
}

const idParam = {
  name: "id",
  in: "path",
  required: true,
  description: "The bot's application id; it must be the bot that owns the token.",
  schema: jsonSchema(BotId, "input"),
};

function operation(input: {
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
}): JsonObject {
  return {
    summary: input.summary,
    description: `${input.description}\n\nRate limit: ${DEFAULT_LIMITS[input.endpoint]} requests per token per minute.`,
    security: [{ botToken: [] }],
    parameters: [...(input.withId ? [idParam] : []), ...(input.parameters ?? [])],
    ...(input.body ? { requestBody: { required: true, content: json(ref(input.body)) } } : {}),
    responses: {
      [String(input.status ?? 200)]: {
        description: "OK",
        headers: rateHeaders,
        content: json(ref(input.response)),
      },
      ...authenticatedErrors(input.errors),
      ...Object.fromEntries(
        Object.entries(input.errorNotes ?? {}).map(([status, text]) => [status, errorResponse(text)]),
      ),
    },
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
    "Catching up: the votes at or after this instant, OLDEST first, paged with `nextCursor`. An ISO 8601 date-time with a time zone (`Z` or an offset).",
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

const ALIAS_NOTE =
  "Same as the route with an id, for clients written for top.gg (@top-gg/sdk v3, dblapi.js, topggpy) that leave the id out: the bot is the token's.";

function buildPaths(): JsonObject {
  const commands = operation({
    summary: "Replace the command list",
    description: `Replaces the whole list (not a merge). At most ${COMMAND_LIMITS.maxCommands} commands; duplicate names are dropped, the first kept; \`count\` is the number kept.`,
    endpoint: "commands",
    withId: true,
    body: "CommandsBody",
    response: "CommandsResponse",
    errors: [400, 401, 404, 413, 429, 500],
  });
  const commandsAlias = operation({
    summary: "Replace the command list (discordbotlist.com client spelling)",
    description:
      "The same as `PUT` (canonical): same limits, same answers, and the same rate-limit window, shared with `PUT`. The body is the platform's command array itself (as discordbotlist.com's client `postBotCommands` sends it) or `{commands: [...]}`.",
    endpoint: "commands",
    withId: true,
    body: "CommandsPostBody",
    response: "CommandsResponse",
    errors: [400, 401, 404, 413, 429, 500],
  });
  const stats = (withId: boolean) =>
    operation({
      summary: withId ? "Report the server count" : "Report the server count (bot from the token)",
      description: withId
        ? "`server_count`, or its aliases `guilds` (discordbotlist.com) and `guildCount` (discord.bots.gg). `server_count` may be an array of per-shard counts, and a non-empty `shards` array is summed. A post with `shard_id` (or `shardId`) is that shard's count: the bot's count becomes the sum of its shards' latest counts, and a `shard_count` (or `shardCount`) drops the shards at or beyond it; a post without a shard id (or with a per-shard array) sets the total and clears the shard counts. `server_count` in the answer is the count posted. Other extra fields are ignored. The check-in time is written on every post."
        : ALIAS_NOTE,
      endpoint: "stats",
      withId,
      body: "StatsBody",
      response: "StatsResponse",
      errors: [400, 401, 404, 413, 429, 500],
    });
  const check = (withId: boolean) =>
    operation({
      summary: withId ? "Check a user's vote" : "Check a user's vote (bot from the token)",
      description: withId
        ? "Inside the 12-hour window: `voted` 1, `hasVoted` true, `votedAt`, `nextVoteAt` = votedAt + 12 h. Outside: `voted` 0, `hasVoted` false, both timestamps null."
        : ALIAS_NOTE,
      endpoint: "check",
      withId,
      parameters: [userIdParam],
      response: "VoteCheckResult",
      errors: [400, 401, 404, 429],
    });
  const votes = (withId: boolean) =>
    operation({
      summary: withId ? "List votes" : "List votes (bot from the token)",
      description: withId
        ? `Without \`since\` and \`cursor\`: the newest \`limit\` votes, newest first, from the append-only vote log, and no \`nextCursor\`.\n\nWith \`since\` and/or \`cursor\` (catching up after downtime): the votes at or after \`since\` and after the cursor's vote (both apply when both are given), OLDEST first, \`limit\` per page (clamped ${VOTES_LIMIT.min}..${VOTES_LIMIT.max}, default ${VOTES_LIMIT.default}), with \`nextCursor\` while more follow (absent on the last page). A vote is listed this way once it is ${VOTE_CURSOR_SETTLE_MS / 1000} seconds old (late commits never fall behind a cursor); to poll later, pass the last \`voted_at\` received as \`since\` and skip the vote repeated at that instant. Each page is a keyset read of the log's index: its cost does not grow with the log.`
        : ALIAS_NOTE,
      endpoint: "votes",
      withId,
      parameters: [limitParam, sinceParam, cursorParam],
      response: "VotesPage",
      errors: [400, 401, 404, 429],
      errorNotes: {
        400: "Only with `since` or `cursor`: `since` is not an ISO 8601 date-time with a time zone, the cursor is malformed, or it is another bot's.",
      },
    });
  const deliveries = operation({
    summary: "List webhook delivery attempts",
    description:
      "The bot's last ten webhook delivery attempts, newest first, across its deliveries: each with its own `outcome` (`delivered` on a 2xx, else `failed`) beside its delivery's `deliveryState` now (`pending`, `delivered`, `failed`), and the `series` it belongs to (0, or n after the nth redelivery).",
    endpoint: "deliveries",
    withId: true,
    response: "DeliveryAttemptsResponse",
    errors: [401, 404, 429],
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
    errorNotes: {
      404: `\`Bot not found.\` as on every endpoint, or \`${DELIVERY_MESSAGES.notFound}\`: no delivery with this id for this bot (one body for an unknown id, another bot's delivery and an id that is not a UUID).`,
      409: `\`${DELIVERY_MESSAGES.pending}\` or \`${DELIVERY_MESSAGES.noWebhook}\``,
    },
  });
  return {
    "/api/v1/bots/{id}/commands": { put: commands, post: commandsAlias },
    "/api/v1/bots/{id}/webhook/deliveries": { get: deliveries },
    "/api/v1/bots/{id}/webhook/deliveries/{deliveryId}/redeliver": { post: redeliver },
    "/api/v1/bots/{id}/stats": { post: stats(true) },
    "/api/v1/bots/stats": { post: stats(false) },
    "/api/v1/bots/{id}/check": { get: check(true) },
    "/api/v1/bots/check": { get: check(false) },
    "/api/v1/bots/{id}/votes": { get: votes(true) },
    "/api/v1/bots/votes": { get: votes(false) },
    "/api/health": {
      get: {
        summary: "Health",
        description: "No credential. Checks PostgreSQL and Redis with short timeouts.",
        security: [],
        responses: {
          "200": { description: "The service can serve.", content: json(ref("Health")) },
          "503": { description: "A dependency is down; `error` names it.", content: json(ref("Health")) },
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

export function buildOpenApi(): JsonObject {
  return {
    openapi: "3.1.0",
    info: {
      title: "Bot Listing Directory API",
      version: "1.0.0",
      description:
        "Publish a bot's commands and server count, check and list votes. Errors are `{error}` (+ `retryAfter` on 429).",
    },
    servers: [{ url: "/" }],
    paths: buildPaths(),
    components: {
      securitySchemes: {
        botToken: {
          type: "apiKey",
          in: "header",
          name: "Authorization",
          description:
            "The bot's API token: bare, `Bearer <token>` or `Bot <token>` (scheme names case-insensitive).",
        },
      },
      schemas: componentSchemas({
        CommandsBody: [CommandsBody, "input"],
        CommandsPostBody: [CommandsPostBody, "input"],
        CommandsResponse: [CommandsResponse, "output"],
        StatsBody: [StatsBody, "input"],
        StatsResponse: [StatsResponse, "output"],
        VoteCheckResult: [VoteCheckResult, "output"],
        VotesPage: [VotesPage, "output"],
        DeliveryAttemptsResponse: [DeliveryAttemptsResponse, "output"],
        RedeliverResponse: [RedeliverResponse, "output"],
        Error: [ErrorBody, "output"],
        Health: [HealthBody, "output"],
      }),
    },
  };
}
