/**
 * GET /api/v1/bots/{id}/webhook/deliveries: the bot's last ten webhook delivery attempts, newest
 * first, each with its own outcome beside its delivery's state (the edit page's list).
 */
import { listRecentAttempts } from "@botdir/db";
import type { DeliveryAttemptsResponse } from "@botdir/schema";
import { sendJson } from "@botdir/service-kit";
import type { Request, Response, Router } from "express";
import type { ApiContext } from "../context.js";
import { admit, countConfirmed, limitFirst } from "../http/access.js";
import { allowOnly } from "../http/methods.js";
import { requireTokenHash } from "../services/auth.js";

export const DELIVERIES_PATH = "/api/v1/bots/:id/webhook/deliveries";

export function registerDeliveries(router: Router, ctx: ApiContext): void {
  router.get(DELIVERIES_PATH, async (req: Request<{ id: string }>, res: Response) => {
    const tokenHash = requireTokenHash(req);
    // The shared refusal path: limited → no query; unknown token → 401 without a Redis key.
    const first = await limitFirst(ctx, res, "deliveries", tokenHash, req.params.id);
    const tokenBotId = await ctx.authenticate(tokenHash);
    const rate = await countConfirmed(ctx, "deliveries", tokenHash, first, tokenBotId);
    const botId = admit(res, { tokenBotId, pathId: req.params.id, rate });
    const body: DeliveryAttemptsResponse = { attempts: await listRecentAttempts(ctx.db, botId) };
    res.setHeader("Cache-Control", "no-store");
    sendJson(res, body);
  });
  allowOnly(router, DELIVERIES_PATH, ["GET"]);
}
