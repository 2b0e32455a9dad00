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
    if (!Array.isArray(result.data)) return { total: result.data, perShardList: false };
    const total = sumCounts(result.data, ctx);
    return total === z.NEVER ? z.NEVER : { total, perShardList: true };
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

/** Most shards a bot may report (shard_count); shard ids are 0 .. shard_count - 1. */
export const MAX_SHARD_COUNT = 65_536;

/** A whole number in [min, max], or the one sentence naming what is wrong. */
const ShardNumber = (min: number, max: number) =>
  z
    .number({ error: "must be a number" })
    .refine(Number.isInteger, { message: "must be a whole number", abort: true })
    .min(min, min === 0 ? "must not be negative" : `must be at least ${min}`)
    .max(max, `must be at most ${max}`)
    .meta({ type: "integer" });

const ShardId = ShardNumber(0, MAX_SHARD_COUNT - 1);
const ShardCount = ShardNumber(1, MAX_SHARD_COUNT);

/** The first of `names` present in `body` with a non-null value (clients send null when unsharded). */
function firstPresent(
  body: Record<string, unknown>,
  names: readonly string[],
): [string, unknown] | undefined {
  for (const name of names) if (body[name] !== undefined && body[name] !== null) return [name, body[name]];
  return undefined;
}

/** The shard a per-shard post is for: its id and, when the client sends it, the shard count. */
export interface ShardReport {
  id: number;
  count: number | null;
}

const SHARD_ID_NAMES = ["shard_id", "shardId"] as const;
const SHARD_COUNT_NAMES = ["shard_count", "shardCount"] as const;

/**
 * The count may be sent as `server_count` (canonical), `guilds` (discordbotlist.com clients) or
 * `guildCount` (discord.bots.gg clients). `server_count` may also be an array of per-shard counts
 * (summed), and a non-empty `shards` array of per-shard counts (top.gg Java/.NET clients, which
 * send `server_count: 0` beside it) wins over the names. Otherwise the first present name in the
 * order above is used.
 *
 * A post with a shard id (`shard_id`: top.gg, discordbotlist.com; `shardId`: discord.bots.gg) and a
 * single count is that shard's count (`shard`); the shard count (`shard_count` / `shardCount`) is
 * optional because discordbotlist.com clients do not send it, and when sent the id must be below it.
 * A post with a per-shard array is a total whatever else it carries. Without a shard id, a shard
 * count is ignored (discord.bots.gg clients send `shardCount` beside a total). Other fields that
 * client libraries send (shard_no, users, voice_connections...) are accepted and ignored.
 */
export const StatsBody = z
  .looseObject({
    server_count: CountOrShardList.optional(),
    guilds: ServerCount.optional(),
    guildCount: ServerCount.optional(),
    shards: ShardsField.optional(),
    // Validated in the transform (the first spelling present wins); described here for OpenAPI.
    shard_id: z.unknown().optional().meta({
      type: "integer",
      minimum: 0,
      description:
        "The posting shard (alias `shardId`): the count is that shard's, and the bot's server_count is the sum of its shards' latest counts. Must be below shard_count when that is sent. Ignored beside a per-shard array.",
    }),
    shard_count: z.unknown().optional().meta({
      type: "integer",
      minimum: 1,
      maximum: MAX_SHARD_COUNT,
      description:
        "The bot's number of shards (alias `shardCount`); with shard_id, the counts of shards at or beyond it are dropped. Without shard_id it is ignored.",
    }),
  })
  .transform((body, ctx) => {
    const count = body.shards ?? body.server_count?.total ?? body.guilds ?? body.guildCount;
    if (count === undefined) {
      ctx.addIssue({ code: "custom", path: ["server_count"], message: "is required" });
      return z.NEVER;
    }
    const raw = body as Record<string, unknown>;
    const perShardArray = body.shards !== undefined || body.server_count?.perShardList === true;
    const idField = perShardArray ? undefined : firstPresent(raw, SHARD_ID_NAMES);
    if (idField === undefined) return { server_count: count };

    const [idName, idValue] = idField;
    const id = ShardId.safeParse(idValue);
    if (!id.success) {
      for (const issue of id.error.issues) ctx.addIssue({ ...issue, path: [idName] } as never);
      return z.NEVER;
    }
    const countField = firstPresent(raw, SHARD_COUNT_NAMES);
    if (countField === undefined) return { server_count: count, shard: { id: id.data, count: null } };
    const [countName, countValue] = countField;
    const shardCount = ShardCount.safeParse(countValue);
    if (!shardCount.success) {
      for (const issue of shardCount.error.issues) ctx.addIssue({ ...issue, path: [countName] } as never);
      return z.NEVER;
    }
    if (id.data >= shardCount.data) {
      ctx.addIssue({
        code: "custom",
        path: [idName],
        message: `must be less than ${countName} (${shardCount.data})`,
      });
      return z.NEVER;
    }
    const shard: ShardReport = { id: id.data, count: shardCount.data };
    return { server_count: count, shard };
  });
export type StatsBody = z.output<typeof StatsBody>;

export const StatsResponse = z.object({ success: z.boolean(), server_count: z.number().int() });
export type StatsResponse = z.infer<typeof StatsResponse>;
