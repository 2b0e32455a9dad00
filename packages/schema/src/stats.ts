import { z } from "zod";

/** A server count: a non-negative safe integer sent as a JSON number (a string is refused). */
export const ServerCount = z
  .number({ error: "must be a number" })
  // Not .int(): zod's int is "safe integer", which would call 2^53 "not a whole number".
  .refine(Number.isInteger, { message: "must be a whole number", abort: true })
  .min(0, "must not be negative")
  .max(Number.MAX_SAFE_INTEGER, "must be a safe integer")
  .meta({ type: "integer" });

/** Per-shard server counts, as top.gg clients send them (`shards`, or `server_count` as an array). */
export const ShardCounts = z.array(ServerCount);

const COUNT_DOC = {
  anyOf: [
    { type: "integer", minimum: 0, maximum: Number.MAX_SAFE_INTEGER },
    {
      type: "array",
      items: { type: "integer", minimum: 0, maximum: Number.MAX_SAFE_INTEGER },
      description: "Per-shard counts; the total is their sum.",
    },
  ],
};

/** Sums per-shard counts, refusing a total that is not a safe integer. */
function sumCounts(counts: readonly number[], ctx: z.RefinementCtx): number | typeof z.NEVER {
  const total = counts.reduce((a, b) => a + b, 0);
  if (!Number.isSafeInteger(total)) {
    ctx.addIssue({ code: "custom", message: "must add up to a safe integer" });
    return z.NEVER;
  }
  return total;
}

/** Re-raises a nested parse's issues; their paths are relative, so zod prefixes the field name. */
function forwardIssues(ctx: z.RefinementCtx, issues: readonly z.core.$ZodIssue[], input: unknown): void {
  for (const issue of issues) ctx.issues.push({ ...issue, input } as z.core.$ZodRawIssue);
}

/**
 * A count as a number, or as an array of per-shard counts that is summed. The shape is chosen by
 * the value (not a zod union) so that the 400 names the real problem ("server_count[1] must be a
 * number.") instead of "Invalid input".
 */
const CountOrShardList = z
  .unknown()
  .transform((value, ctx) => {
    if (value === undefined) return undefined;
    const list = Array.isArray(value);
    const result = (list ? ShardCounts : ServerCount).safeParse(value);
    if (!result.success) {
      forwardIssues(ctx, result.error.issues, value);
      return z.NEVER;
    }
    return Array.isArray(result.data) ? sumCounts(result.data, ctx) : result.data;
  })
  .meta(COUNT_DOC);

/** `shards` as top.gg defines it (per-shard counts). Other directories' `shards` is a shard count: ignored. */
const ShardsField = z
  .unknown()
  .transform((value, ctx) => {
    if (!Array.isArray(value) || value.length === 0) return undefined;
    const result = ShardCounts.safeParse(value);
    if (!result.success) {
      forwardIssues(ctx, result.error.issues, value);
      return z.NEVER;
    }
    return sumCounts(result.data, ctx);
  })
  .meta({
    description:
      "top.gg style per-shard counts; when a non-empty array, the total is their sum and takes precedence. Any other value is ignored.",
  });

/**
 * The count may be sent as `server_count` (canonical), `guilds` (discordbotlist.com clients) or
 * `guildCount` (discord.bots.gg clients). `server_count` may also be an array of per-shard counts
 * (summed), and a non-empty `shards` array of per-shard counts (top.gg Java/.NET clients, which
 * send `server_count: 0` beside it) wins over the names. Otherwise the first present name in the
 * order above is used. Other fields that client libraries send (shard_id, shard_count, shard_no,
 * users, voice_connections, shardId, shardCount...) are accepted and ignored.
 */
export const StatsBody = z
  .looseObject({
    server_count: CountOrShardList.optional(),
    guilds: ServerCount.optional(),
    guildCount: ServerCount.optional(),
    shards: ShardsField.optional(),
  })
  .transform((body, ctx) => {
    const count = body.shards ?? body.server_count ?? body.guilds ?? body.guildCount;
    if (count === undefined) {
      ctx.addIssue({ code: "custom", path: ["server_count"], message: "is required" });
      return z.NEVER;
    }
    return { server_count: count };
  });
export type StatsBody = z.output<typeof StatsBody>;

export const StatsResponse = z.object({ success: z.boolean(), server_count: z.number().int() });
export type StatsResponse = z.infer<typeof StatsResponse>;
