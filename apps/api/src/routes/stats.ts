/**
 * POST /api/v1/bots/{id}/stats, and POST /api/v1/bots/stats (top.gg-style clients: @top-gg/sdk v3,
 * dblapi.js and topggpy post without an id; the bot is the token's).
 */
import { parseOrThrow, StatsBody, type StatsResponse, sendJson } from "@botdir/schema";
import type { Request, Response, Router } from "express";
import type { ApiContext } from "../context.js";
import { deferredJsonBody } from "../http/json-body.js";
import { allowOnly } from "../http/methods.js";
import { authenticatedWrite } from "../http/write.js";

export const STATS_PATH = "/api/v1/bots/:id/stats";
export const STATS_ALIAS_PATH = "/api/v1/bots/stats";

export function registerStats(router: Router, ctx: ApiContext): void {
  const handler = async (req: Request<{ id?: string }>, res: Response) => {
    const { input, result } = await authenticatedWrite(ctx, req, res, {
      endpoint: "stats",
      pathId: req.params.id,
      parse: (body) => parseOrThrow(StatsBody, body).server_count,
      // The check-in timestamp is written on every post, even when the count is unchanged.
      write: (tokenHash, botId, serverCount) =>
        ctx.writeStats({ tokenHash, botId, serverCount, now: ctx.clock.now() }),
    });
    if (result.changed) await ctx.caches.invalidatePage(result.botId);
    // Always a JSON body (never an empty 204): some clients parse every 2xx answer.
    const body: StatsResponse = { success: true, server_count: input };
    sendJson(res, body);
  };
  router.post(STATS_ALIAS_PATH, deferredJsonBody(ctx.bodyLimits.stats), handler);
  router.post(STATS_PATH, deferredJsonBody(ctx.bodyLimits.stats), handler);
  allowOnly(router, STATS_ALIAS_PATH, ["POST"]);
  allowOnly(router, STATS_PATH, ["POST"]);
}
