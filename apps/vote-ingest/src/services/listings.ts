/**
 * Listing management: the one service module behind the internal HTTP endpoints (the site's edit
 * page) and `pnpm botctl`. Tokens are generated here, shown once, and stored only as a hash;
 * webhook secrets are generated here, shown once, and stored encrypted (AES-256-GCM).
 */
import {
  createSecretBox,
  type Db,
  generateToken,
  generateWebhookSecret,
  hashToken,
  Prisma,
  parseEncryptionKey,
  type SecretBox,
  toIso,
  toIsoOrNull,
} from "@botdir/db";
import {
  ApiError,
  type Clock,
  checkWebhookUrl,
  MESSAGES,
  type Resolver,
  systemResolver,
} from "@botdir/schema";

export interface ListingsDeps {
  db: Db;
  clock: Clock;
  /** Encrypts webhook secrets at rest; null when SECRET_ENCRYPTION_KEY is not configured. */
  secretBox?: SecretBox | null;
  /** WEBHOOK_ALLOW_PRIVATE_TARGETS: http and private hosts allowed (development and tests only). */
  allowPrivateTargets?: boolean;
  /** Resolves webhook host names to refuse private DNS answers; null skips the DNS check. */
  resolver?: Resolver | null;
}

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
  has_token: boolean;
  token_created_at: string | null;
  created_at: string;
}

/**
 * The state of the attempt's delivery, as the edit page shows it: `delivered`, `failed` (five
 * attempts made, no more will follow), or `retrying` (the delivery is still pending).
 */
export type AttemptOutcome = "delivered" | "failed" | "retrying";

export interface AttemptView {
  deliveryId: string;
  attempt: number;
  statusCode: number | null;
  /** null when the attempt succeeded; otherwise e.g. http_status, timeout, connection, redirect. */
  errorKind: string | null;
  outcome: AttemptOutcome;
  attemptedAt: string;
}

/** The edit page lists the last ten attempts. */
export const ATTEMPTS_SHOWN = 10;

const NO_ENCRYPTION_KEY =
  "Webhook secrets cannot be stored: SECRET_ENCRYPTION_KEY is not configured on this service.";

/** The secret box for SECRET_ENCRYPTION_KEY (64 hex characters or base64 of 32 bytes), or null. */
export function secretBoxFromKey(key: string | undefined): SecretBox | null {
  if (!key) return null;
  const bytes = parseEncryptionKey(key);
  if (!bytes) throw new Error("SECRET_ENCRYPTION_KEY must be 32 bytes as 64 hex characters or base64.");
  return createSecretBox(bytes);
}

function isUniqueViolation(error: unknown): boolean {
  return error instanceof Prisma.PrismaClientKnownRequestError && error.code === "P2002";
}

function isNotFound(error: unknown): boolean {
  return error instanceof Prisma.PrismaClientKnownRequestError && error.code === "P2025";
}

function notFound(): ApiError {
  return new ApiError("not_found", MESSAGES.botNotFound);
}

function outcomeOf(state: "pending" | "delivered" | "failed"): AttemptOutcome {
  return state === "pending" ? "retrying" : state;
}

export function createListings(deps: ListingsDeps) {
  const { prisma } = deps.db;
  const allowPrivate = deps.allowPrivateTargets ?? false;
  const resolver = deps.resolver === undefined ? systemResolver : deps.resolver;

  /** Runs an update of one bot; a bot deleted in between is a 404, not a 500. */
  async function updateBot<T>(run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (error) {
      if (isNotFound(error)) throw notFound();
      throw error;
    }
  }

  async function requireBot(id: string): Promise<{ status: BotStatusName }> {
    const bot = await prisma.bot.findUnique({ where: { id }, select: { status: true } });
    if (!bot) throw notFound();
    return bot;
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
        if (isUniqueViolation(error)) throw new ApiError("conflict", "A bot with this id already exists.");
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
        throw new ApiError("conflict", "The bot is not approved yet; only approved bots get a token.");
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
      const verdict = await checkWebhookUrl(rawUrl, { allowPrivate }, resolver);
      if (!verdict.ok) throw new ApiError("bad_request", verdict.reason);
      if (!deps.secretBox) throw new ApiError("unavailable", NO_ENCRYPTION_KEY);
      const secret = generateWebhookSecret();
      const encrypted = deps.secretBox.encrypt(secret);
      const now = deps.clock.now();
      await updateBot(() =>
        prisma.bot.update({
          where: { id },
          data: { webhookUrl: verdict.url, webhookSecretEncrypted: encrypted, updatedAt: now },
        }),
      );
      return { id, url: verdict.url, secret };
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
          data: { webhookUrl: null, webhookSecretEncrypted: null, updatedAt: now },
        }),
      );
      return { id, url: null };
    },

    /** The last ten delivery attempts of the bot, newest first. */
    async listAttempts(id: string): Promise<{ attempts: AttemptView[] }> {
      await requireBot(id);
      const rows = await prisma.attempt.findMany({
        where: { botId: id },
        orderBy: [{ attemptedAt: "desc" }, { id: "desc" }],
        take: ATTEMPTS_SHOWN,
        select: {
          deliveryId: true,
          attemptNumber: true,
          statusCode: true,
          errorKind: true,
          attemptedAt: true,
          delivery: { select: { state: true } },
        },
      });
      return {
        attempts: rows.map((row) => ({
          deliveryId: row.deliveryId,
          attempt: row.attemptNumber,
          statusCode: row.statusCode,
          errorKind: row.errorKind,
          outcome: outcomeOf(row.delivery.state),
          attemptedAt: toIso(row.attemptedAt),
        })),
      };
    },

    /** The listing as the edit page shows it: no token, no secret. */
    async getBot(id: string): Promise<ListingView> {
      const bot = await prisma.bot.findUnique({
        where: { id },
        select: {
          id: true,
          status: true,
          approvedAt: true,
          commands: true,
          serverCount: true,
          checkedInAt: true,
          webhookUrl: true,
          tokenHash: true,
          tokenCreatedAt: true,
          createdAt: true,
        },
      });
      if (!bot) throw notFound();
      return {
        id: bot.id,
        status: bot.status,
        approved: bot.status === "approved",
        approved_at: toIsoOrNull(bot.approvedAt),
        commands: bot.commands,
        server_count: bot.serverCount === null ? null : Number(bot.serverCount),
        checked_in_at: toIsoOrNull(bot.checkedInAt),
        webhook_url: bot.webhookUrl,
        has_token: bot.tokenHash !== null,
        token_created_at: toIsoOrNull(bot.tokenCreatedAt),
        created_at: toIso(bot.createdAt),
      };
    },
  };
}

export type Listings = ReturnType<typeof createListings>;
