import { z } from "zod";

/** A server count: a non-negative safe integer sent as a JSON number (a string is refused). */
export const ServerCount = z
  .number({ error: "must be a number" })
  .int("must be a whole number")
  .min(0, "must not be negative")
  .max(Number.MAX_SAFE_INTEGER, "must be a safe integer");

/**
 * The count may be sent as `server_count` (canonical), `guilds` (discordbotlist.com clients) or
 * `guildCount` (discord.bots.gg clients). The first present name in that order is used. Other
 * fields that client libraries send (shard_id, shard_count, shards, users, voice_connections,
 * shardId, shardCount...) are accepted and ignored.
 */
export const StatsBody = z
  .looseObject({
    server_count: ServerCount.optional(),
    guilds: ServerCount.optional(),
    guildCount: ServerCount.optional(),
  })
  .transform((body, ctx) => {
    const count = body.server_count ?? body.guilds ?? body.guildCount;
    if (count === undefined) {
      ctx.addIssue({ code: "custom", path: ["server_count"], message: "is required" });
      return z.NEVER;
    }
    return { server_count: count };
  });
export type StatsBody = z.output<typeof StatsBody>;

export const StatsResponse = z.object({ success: z.boolean(), server_count: z.number().int() });
export type StatsResponse = z.infer<typeof StatsResponse>;
