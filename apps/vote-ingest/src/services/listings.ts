/**
 * Listing management: the one service module behind the internal HTTP endpoints (the site's edit
 * page) and `pnpm botctl`. Tokens are generated here, shown once, and stored only as a hash.
 */
import { type Db, generateToken, hashToken, Prisma } from "@botdir/db";
import { ApiError, type Clock, MESSAGES } from "@botdir/schema";

export interface ListingsDeps {
  db: Db;
  clock: Clock;
}

export type BotStatusName = "pending" | "approved";

export interface BotSummary {
  id: string;
  status: BotStatusName;
}

function isUniqueViolation(error: unknown): boolean {
  return error instanceof Prisma.PrismaClientKnownRequestError && error.code === "P2002";
}

function isNotFound(error: unknown): boolean {
  return error instanceof Prisma.PrismaClientKnownRequestError && error.code === "P2025";
}

export function createListings(deps: ListingsDeps) {
  const { prisma } = deps.db;

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

    async approveBot(id: string): Promise<BotSummary> {
      try {
        const now = deps.clock.now();
        const existing = await prisma.bot.findUnique({ where: { id }, select: { status: true } });
        if (!existing) throw new ApiError("not_found", MESSAGES.botNotFound);
        if (existing.status === "approved") return { id, status: "approved" };
        return await prisma.bot.update({
          where: { id },
          data: { status: "approved", approvedAt: now, updatedAt: now },
          select: { id: true, status: true },
        });
      } catch (error) {
        if (isNotFound(error)) throw new ApiError("not_found", MESSAGES.botNotFound);
        throw error;
      }
    },

    /**
     * Generates a new API token for an approved bot; the previous one stops working at once
     * (the API authenticates against the stored hash on every request). Returned once, never stored.
     */
    async rotateToken(id: string): Promise<{ id: string; token: string }> {
      const bot = await prisma.bot.findUnique({ where: { id }, select: { status: true } });
      if (!bot) throw new ApiError("not_found", MESSAGES.botNotFound);
      if (bot.status !== "approved") {
        throw new ApiError("conflict", "The bot is not approved yet; only approved bots get a token.");
      }
      const token = generateToken();
      const now = deps.clock.now();
      await prisma.bot.update({
        where: { id },
        data: { tokenHash: hashToken(token), tokenCreatedAt: now, updatedAt: now },
      });
      return { id, token };
    },
  };
}

export type Listings = ReturnType<typeof createListings>;
