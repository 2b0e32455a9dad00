/**
 * Listing management: the one service module behind the internal HTTP endpoints (the site's edit
 * page) and `pnpm botctl`. Tokens are generated here, shown once, and stored only as a hash;
 * webhook secrets are generated here, shown once, and stored encrypted (AES-256-GCM).
 */

import { randomUUID } from "node:crypto";
import {
  createSecretBox,
  type Db,
  deliveryTraceId,
  generateToken,
  generateWebhookSecret,
  getRecovery,
  hashToken,
  listRecentAttempts,
  Prisma,
  type RecoveryView,
  redeliver,
  type SecretBox,
  startRecovery,
  toIso,
  toIsoOrNull,
} from "@botdir/db";
import {
  ApiError,
  MESSAGES,
  parseRecoverSince,
  parseRecoverWindow,
  RECOVERY_MESSAGES,
  type RecoverResponse,
  type RedeliverResponse,
  recoveryRefusal,
  redeliveryRefusal,
  WEBHOOK_EVENTS,
  type WebhookEventName,
} from "@botdir/schema";
import {
  activeTraceId,
  activeTraceparent,
  type Clock,
  inSpan,
  type KeyRingEnv,
  keyRing,
  linkTo,
} from "@botdir/service-kit";
import { checkWebhookUrl, type Resolver, systemResolver } from "@botdir/webhook-targets";
import type { DeliveryQueue } from "../outbox/queue.js";
import {
  buildTestRequest,
  sendTestRequest,
  TEST_EVENT,
  type TestEventName,
  type TestOutcome,
} from "./webhook-test.js";

export interface ListingsDeps {
  db: Db;
  clock: Clock;
  /** Encrypts webhook secrets at rest; null when SECRET_ENCRYPTION_KEY is not configured. */
  secretBox?: SecretBox | null;
  /** WEBHOOK_ALLOW_PRIVATE_TARGETS: http and private hosts allowed (development and tests only). */
  allowPrivateTargets?: boolean;
  /** Resolves webhook host names to refuse private DNS answers; null skips the DNS check. */
  resolver?: Resolver | null;
  /** Hands redeliveries to the queue; without it the outbox relay does at its next tick. */
  deliveryQueue?: Pick<DeliveryQueue, "handOff">;
  /** WEBHOOK_SECRET_OVERLAP_MS: how long a rotated-out secret keeps signing (default 24 h). */
  secretOverlapMs?: number;
  /** Test events per bot per minute (default TEST_EVENTS_PER_MINUTE). */
  testEventsPerMinute?: number;
  /** Deadline of a test event's request (default 10 s, as an attempt). */
  testTimeoutMs?: number;
  /**
   * Deadline of that lookup (WEBHOOK_DNS_TIMEOUT_MS; default 3 s), injected resolvers included: a
   * name that does not answer in time is accepted and checked again by the dispatcher.
   */
  dnsTimeoutMs?: number;
}

export const DEFAULT_SECRET_OVERLAP_MS = 24 * 60 * 60 * 1000;
export const TEST_EVENTS_PER_MINUTE = 5;

/** `active`, or `disabled` after every attempt failed for WEBHOOK_DISABLE_AFTER_MS (dispatcher). */
export type WebhookState = "active" | "disabled";

export type BotStatusName = "pending" | "approved";

export interface BotSummary {
  id: string;
  status: BotStatusName;
}

/** What the edit page shows about a listing. Never the token or the webhook secret. */
export interface ListingView {
  id: string;
  status: BotStatusName;
  approved: boolean;
  approved_at: string | null;
  commands: unknown;
  server_count: number | null;
  checked_in_at: string | null;
  webhook_url: string | null;
  /** null without a URL; `disabled` when the dispatcher gave up on a dead endpoint. */
  webhook_state: WebhookState | null;
  webhook_disabled_reason: string | null;
  webhook_disabled_at: string | null;
  /** The events the webhook receives (vote.create by default). */
  webhook_events: WebhookEventName[];
  has_token: boolean;
  token_created_at: string | null;
  created_at: string;
}

import type { AttemptView } from "@botdir/db";

export { ATTEMPTS_SHOWN } from "@botdir/db";
export type { AttemptView };

const NO_ENCRYPTION_KEY =
  "Webhook secrets cannot be stored: SECRET_ENCRYPTION_KEY is not configured on this service.";

/**
 * The secret box of the key ring (SECRET_ENCRYPTION_KEYS, or SECRET_ENCRYPTION_KEY as a ring of
 * one; keys already validated by env.ts), or null when neither is configured.
 */
export function secretBoxFromEnv(env: KeyRingEnv): SecretBox | null {
  const keys = keyRing(env);
  return keys.length === 0 ? null : createSecretBox(keys);
}

const NO_WEBHOOK = "The bot has no webhook URL configured.";

/** Clears a rotation's overlap (a new URL gets a fresh secret with no overlap). */
const NO_OVERLAP = { webhookPreviousSecretEncrypted: null, webhookPreviousSecretUntil: null };

/** (Re-)enables the webhook: failures before `now` no longer count toward disabling it. */
function enabledAt(now: Date) {
  return { webhookEnabledAt: now, webhookDisabledAt: null, webhookDisabledReason: null };
}

function isUniqueViolation(error: unknown): boolean {
  return error instanceof Prisma.PrismaClientKnownRequestError && error.code === "P2002";
}

function isNotFound(error: unknown): boolean {
  return error instanceof Prisma.PrismaClientKnownRequestError && error.code === "P2025";
}

/** The known events among `names`, once each, in the order of WEBHOOK_EVENTS. */
function knownEvents(names: readonly string[]): WebhookEventName[] {
  return WEBHOOK_EVENTS.filter((event) => names.includes(event));
}

function notFound(): ApiError {
  return new ApiError("not_found", MESSAGES.botNotFound);
}

export function createListings(deps: ListingsDeps) {
  const { prisma } = deps.db;
  const allowPrivate = deps.allowPrivateTargets ?? false;
  const resolver = deps.resolver === undefined ? systemResolver : deps.resolver;
  const rules = {
    allowPrivate,
    ...(deps.dnsTimeoutMs === undefined ? {} : { dnsTimeoutMs: deps.dnsTimeoutMs }),
  };

  /** Runs an update of one bot; a bot deleted in between is a 404, not a 500. */
  async function updateBot<T>(run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (error) {
      if (isNotFound(error)) throw notFound();
      throw error;
    }
  }

  /** The `select`ed fields of the bot; a 404 when there is no such bot. */
  async function findBot<S extends Prisma.BotSelect>(
    id: string,
    select: S,
  ): Promise<Prisma.BotGetPayload<{ select: S }>> {
    const bot = await prisma.bot.findUnique({ where: { id }, select });
    if (!bot) throw notFound();
    return bot;
  }

  const requireBot = (id: string): Promise<{ status: BotStatusName }> => findBot(id, { status: true });

  /** Starts a recovery of [since, until) under the bot's lock; a refusal is the spec's 409. */
  async function recoverWindow(
    id: string,
    window: { since: Date; until: Date },
    now: Date,
  ): Promise<RecoverResponse> {
    // A trace of its own even outside a request (botctl): every recovered delivery links to it.
    const result = await inSpan(
      "webhook.recover",
      { needsTrace: true, attributes: { "botdir.bot_id": id } },
      () => startRecovery(deps.db, id, window, now, activeTraceparent()),
    );
    if (result.kind !== "started") throw recoveryRefusal(result);
    return { recoveryId: result.recoveryId, queued: result.queued };
  }

  return {
    /** Submits a bot (pending), or approves it at once with `approve`. */
    async createBot(id: string, options: { approve?: boolean } = {}): Promise<BotSummary> {
      const now = deps.clock.now();
      try {
        const bot = await prisma.bot.create({
          data: {
            id,
            status: options.approve ? "approved" : "pending",
            approvedAt: options.approve ? now : null,
            createdAt: now,
            updatedAt: now,
          },
          select: { id: true, status: true },
        });
        return bot;
      } catch (error) {
        if (isUniqueViolation(error))
          throw ApiError.conflict("bot_exists", "A bot with this id already exists.");
        throw error;
      }
    },

    /** Approves a pending bot; approving an approved bot changes nothing. */
    async approveBot(id: string): Promise<BotSummary> {
      const existing = await requireBot(id);
      if (existing.status === "approved") return { id, status: "approved" };
      const now = deps.clock.now();
      return updateBot(() =>
        prisma.bot.update({
          where: { id },
          data: { status: "approved", approvedAt: now, updatedAt: now },
          select: { id: true, status: true },
        }),
      );
    },

    /**
     * Generates a new API token for an approved bot; the previous one stops working at once
     * (the API authenticates against the stored hash on every request). Returned once, never stored.
     */
    async rotateToken(id: string): Promise<{ id: string; token: string }> {
      const bot = await requireBot(id);
      if (bot.status !== "approved") {
        throw ApiError.conflict(
          "not_approved",
          "The bot is not approved yet; only approved bots get a token.",
        );
      }
      const token = generateToken();
      const now = deps.clock.now();
      await updateBot(() =>
        prisma.bot.update({
          where: { id },
          data: { tokenHash: hashToken(token), tokenCreatedAt: now, updatedAt: now },
        }),
      );
      return { id, token };
    },

    /**
     * Sets the vote webhook URL and generates a new secret (every time, also for the same URL).
     * The secret is returned once and stored only encrypted. Deliveries still waiting for a retry
     * go to the new URL, signed with the new secret.
     */
    async setWebhook(id: string, rawUrl: string): Promise<{ id: string; url: string; secret: string }> {
      await requireBot(id);
      const verdict = await checkWebhookUrl(rawUrl, rules, resolver);
      if (!verdict.ok) throw new ApiError("bad_request", verdict.reason);
      if (!deps.secretBox) throw new ApiError("unavailable", NO_ENCRYPTION_KEY);
      const secret = generateWebhookSecret();
      const encrypted = deps.secretBox.encrypt(secret);
      const now = deps.clock.now();
      // A new URL: a fresh secret with no overlap, and a (re-)enabled webhook.
      await updateBot(() =>
        prisma.bot.update({
          where: { id },
          data: {
            webhookUrl: verdict.url,
            webhookSecretEncrypted: encrypted,
            ...NO_OVERLAP,
            ...enabledAt(now),
            updatedAt: now,
          },
        }),
      );
      return { id, url: verdict.url, secret };
    },

    /**
     * A new secret for the configured URL, shown once. For WEBHOOK_SECRET_OVERLAP_MS the previous
     * secret (kept encrypted) signs webhook-signature beside the new one, so receivers can switch
     * without dropping deliveries; Authorization and X-Webhook-Signature-256 use the new one at once.
     */
    async rotateSecret(id: string): Promise<{ id: string; secret: string }> {
      const bot = await findBot(id, { webhookUrl: true, webhookSecretEncrypted: true });
      if (!bot.webhookUrl || !bot.webhookSecretEncrypted) throw ApiError.conflict("no_webhook", NO_WEBHOOK);
      if (!deps.secretBox) throw new ApiError("unavailable", NO_ENCRYPTION_KEY);
      const secret = generateWebhookSecret();
      const now = deps.clock.now();
      const until = new Date(now.getTime() + (deps.secretOverlapMs ?? DEFAULT_SECRET_OVERLAP_MS));
      // Conditional on the secret read above, so two concurrent rotations cannot both keep a
      // "previous" that never signed anything; the loser retries against the winner's secret.
      const { count } = await prisma.bot.updateMany({
        where: { id, webhookSecretEncrypted: bot.webhookSecretEncrypted },
        data: {
          webhookSecretEncrypted: deps.secretBox.encrypt(secret),
          webhookPreviousSecretEncrypted: bot.webhookSecretEncrypted,
          webhookPreviousSecretUntil: until,
          updatedAt: now,
        },
      });
      if (count !== 1)
        throw ApiError.conflict("webhook_changed", "The webhook changed meanwhile; retry the rotation.");
      return { id, secret };
    },

    /**
     * Re-enables a webhook disabled as dead or gone (410); an active one stays active. With
     * `recoverSince` (an ISO time, as a recovery's since) the bot's undelivered votes since then are
     * recovered in the same call; the window is checked before anything changes.
     */
    async enableWebhook(
      id: string,
      options: { recoverSince?: unknown } = {},
    ): Promise<{ id: string; state: WebhookState; recovery?: RecoverResponse }> {
      const bot = await findBot(id, { webhookUrl: true });
      if (!bot.webhookUrl) throw ApiError.conflict("no_webhook", NO_WEBHOOK);
      const now = deps.clock.now();
      const window =
        options.recoverSince === undefined
          ? null
          : parseRecoverSince(options.recoverSince, now, "recoverSince");
      await prisma.bot.updateMany({
        where: { id, webhookDisabledAt: { not: null } },
        data: { ...enabledAt(now), updatedAt: now },
      });
      if (!window) return { id, state: "active" };
      return { id, state: "active", recovery: await recoverWindow(id, window, now) };
    },

    /**
     * Recovers the bot's undelivered votes in [since, until): 202 with the recovery's id and count;
     * vote-ingest's recovery driver queues them (docs/webhooks.md "Recovering undelivered votes").
     */
    async recover(id: string, body: unknown): Promise<RecoverResponse> {
      await requireBot(id);
      const now = deps.clock.now();
      return recoverWindow(id, parseRecoverWindow(body, now), now);
    },

    /** One recovery of the bot with its counts; 404 for an unknown one or another bot's. */
    async getRecovery(id: string, recoveryId: string): Promise<RecoveryView> {
      await requireBot(id);
      const view = await getRecovery(deps.db, id, recoveryId);
      if (!view) throw new ApiError("not_found", RECOVERY_MESSAGES.notFound);
      return view;
    },

    /**
     * Sets the events the webhook receives (already validated: known names, at least one). A
     * `vote.create` is made only for votes cast while subscribed; a `vote.available` only for
     * windows of votes cast while subscribed, and only if still subscribed when the window ends.
     */
    async setWebhookEvents(
      id: string,
      events: readonly WebhookEventName[],
    ): Promise<{ id: string; events: WebhookEventName[] }> {
      const stored = knownEvents(events);
      const now = deps.clock.now();
      await updateBot(() =>
        prisma.bot.update({ where: { id }, data: { webhookEvents: stored, updatedAt: now } }),
      );
      return { id, events: stored };
    },

    /**
     * Sends one signed `webhook.test` request to the configured URL now and answers with its
     * outcome. Nothing enters the vote log; the attempt is listed in the attempt log as a test.
     * At most testEventsPerMinute per bot (429 with retryAfter beyond).
     */
    async sendTestEvent(id: string, event: TestEventName = TEST_EVENT): Promise<TestOutcome> {
      const bot = await findBot(id, {
        webhookUrl: true,
        webhookSecretEncrypted: true,
        webhookPreviousSecretEncrypted: true,
        webhookPreviousSecretUntil: true,
      });
      if (!bot.webhookUrl || !bot.webhookSecretEncrypted) throw ApiError.conflict("no_webhook", NO_WEBHOOK);
      if (!deps.secretBox) throw new ApiError("unavailable", NO_ENCRYPTION_KEY);
      const now = deps.clock.now();
      const testId = randomUUID();
      // Reserve the slot first, then count: concurrent tests cannot all slip under the limit.
      // The test event carries the request's trace id (X-Webhook-Trace), and its log row keeps it.
      // Sent outside a request (botctl), it carries the trace its id names, as a vote cast
      // without a traceparent does.
      const traceId = activeTraceId() ?? deliveryTraceId(testId);
      await prisma.testAttempt.create({ data: { id: testId, botId: id, attemptedAt: now, traceId } });
      const windowStart = new Date(now.getTime() - 60_000);
      const recent = await prisma.testAttempt.findMany({
        where: { botId: id, attemptedAt: { gt: windowStart } },
        orderBy: { attemptedAt: "asc" },
        select: { attemptedAt: true },
      });
      const limit = deps.testEventsPerMinute ?? TEST_EVENTS_PER_MINUTE;
      if (recent.length > limit) {
        await prisma.testAttempt.delete({ where: { id: testId } });
        const oldest = recent[0]?.attemptedAt ?? now;
        const retryAfter = Math.max(1, Math.ceil((oldest.getTime() + 60_000 - now.getTime()) / 1000));
        throw new ApiError("rate_limited", `At most ${limit} test events per minute per bot.`, {
          retryAfter,
        });
      }
      const previousSecret =
        bot.webhookPreviousSecretEncrypted && (bot.webhookPreviousSecretUntil?.getTime() ?? 0) > now.getTime()
          ? deps.secretBox.decrypt(bot.webhookPreviousSecretEncrypted)
          : null;
      const request = buildTestRequest({
        id: testId,
        botId: id,
        secret: deps.secretBox.decrypt(bot.webhookSecretEncrypted),
        previousSecret,
        now,
        traceId,
        event,
      });
      const outcome = await sendTestRequest(bot.webhookUrl, request, {
        allowPrivateTargets: allowPrivate,
        timeoutMs: deps.testTimeoutMs ?? 10_000,
        ...(resolver ? { resolver } : {}),
      });
      await prisma.testAttempt.update({
        where: { id: testId },
        data: {
          delivered: outcome.delivered,
          statusCode: outcome.statusCode,
          errorKind: outcome.errorKind,
          durationMs: outcome.durationMs,
        },
      });
      return outcome;
    },

    /**
     * Removes the URL and its secret. Votes cast afterwards queue no delivery; deliveries still
     * pending find no URL when their next attempt is due (see docs/management.md).
     */
    async clearWebhook(id: string): Promise<{ id: string; url: null }> {
      await requireBot(id);
      const now = deps.clock.now();
      await updateBot(() =>
        prisma.bot.update({
          where: { id },
          data: {
            webhookUrl: null,
            webhookSecretEncrypted: null,
            ...NO_OVERLAP,
            webhookDisabledAt: null,
            webhookDisabledReason: null,
            updatedAt: now,
          },
        }),
      );
      return { id, url: null };
    },

    /**
     * The last ten delivery attempts of the bot, newest first; each with its own outcome and its
     * delivery's state now.
     */
    async listAttempts(id: string): Promise<{ attempts: AttemptView[] }> {
      await requireBot(id);
      return { attempts: await listRecentAttempts(deps.db, id) };
    },

    /**
     * Starts a fresh series of five attempts of a delivered or failed delivery (same id, same body
     * bytes) and hands it to the queue; when the queue cannot take it, the outbox relay does.
     */
    async redeliver(id: string, deliveryId: string): Promise<RedeliverResponse> {
      await requireBot(id);
      const now = deps.clock.now();
      // The new series belongs to this request's trace (a new one, linked to the delivery's
      // previous trace); the row keeps its context for the hand-off and the attempts.
      return inSpan(
        "webhook.redeliver",
        // A trace even outside a request (botctl) with nothing exported: the series keeps it.
        { needsTrace: true, attributes: { "botdir.bot_id": id, "botdir.delivery_id": deliveryId } },
        async (span) => {
          const result = await redeliver(deps.db, id, deliveryId, now, activeTraceparent());
          if (result.kind !== "redelivered") throw redeliveryRefusal(result.kind);
          linkTo(span, result.previousTraceparent);
          // A finished job is removed (removeOnComplete/removeOnFail), so the add creates a new one.
          await deps.deliveryQueue?.handOff(result.delivery, now);
          return { deliveryId, state: "pending" as const, series: result.series };
        },
      );
    },

    /** The listing as the edit page shows it: no token, no secret. */
    async getBot(id: string): Promise<ListingView> {
      const bot = await findBot(id, {
        id: true,
        status: true,
        approvedAt: true,
        commands: true,
        serverCount: true,
        checkedInAt: true,
        webhookUrl: true,
        webhookDisabledAt: true,
        webhookDisabledReason: true,
        webhookEvents: true,
        tokenHash: true,
        tokenCreatedAt: true,
        createdAt: true,
      });
      return {
        id: bot.id,
        status: bot.status,
        approved: bot.status === "approved",
        approved_at: toIsoOrNull(bot.approvedAt),
        commands: bot.commands,
        server_count: bot.serverCount === null ? null : Number(bot.serverCount),
        checked_in_at: toIsoOrNull(bot.checkedInAt),
        webhook_url: bot.webhookUrl,
        webhook_state: bot.webhookUrl === null ? null : bot.webhookDisabledAt ? "disabled" : "active",
        webhook_disabled_reason: bot.webhookDisabledReason,
        webhook_disabled_at: toIsoOrNull(bot.webhookDisabledAt),
        webhook_events: knownEvents(bot.webhookEvents),
        has_token: bot.tokenHash !== null,
        token_created_at: toIsoOrNull(bot.tokenCreatedAt),
        created_at: toIso(bot.createdAt),
      };
    },
  };
}

export type Listings = ReturnType<typeof createListings>;
