/**
 * POST /api/v1/bots/{id}/stats, and POST /api/v1/bots/stats (top.gg-style clients: @top-gg/sdk v3,
 * dblapi.js and topggpy post without an id; the bot is the token's).
 */
import { parseOrThrow, StatsBody, type StatsResponse } from "@botdir/schema";
import { sendJson } from "@botdir/service-kit";
import type { Request, Response, Router } from "express";
import type { ApiContext } from "../context.js";
import { answeringRefusals } from "../http/access.js";
import { jsonBodyReader } from "../http/json-body.js";
import { allowOnly } from "../http/methods.js";
import { authenticatedWrite } from "../http/write.js";

export const STATS_PATH = "/api/v1/bots/:id/stats";
export const STATS_ALIAS_PATH = "/api/v1/bots/stats";

export function registerStats(router: Router, ctx: ApiContext): void {
  const readBody = jsonBodyReader(ctx.bodyLimits.stats);
  const handler = answeringRefusals(async (req: Request<{ id?: string }>, res: Response) => {
    const { input, result } = await authenticatedWrite(ctx, req, res, {
      endpoint: "stats",
      pathId: req.params.id,
      readBody,
      parse: (body) => parseOrThrow(StatsBody, body),
      // The check-in timestamp is written on every post, even when the count is unchanged. A
      // per-shard post stores that shard's count; server_count becomes the sum over the shards.
      write: (tokenHash, botId, stats) =>
        ctx.writeStats({
          tokenHash,
          botId,
          serverCount: stats.server_count,
          shard: stats.shard,
          now: ctx.clock.now(),
        }),
    });
    if (result.changed) await ctx.caches.invalidatePage(result.botId);
    // Always a JSON body (never an empty 204): some clients parse every 2xx answer.
    const body: StatsResponse = { success: true, server_count: input.server_count };
    sendJson(res, body);
  });
  router.post(STATS_ALIAS_PATH, handler);
  router.post(STATS_PATH, handler);
  allowOnly(router, STATS_ALIAS_PATH, ["POST"]);
  allowOnly(router, STATS_PATH, ["POST"]);
}
