/**
 * GET /api/v1/bots/{id}/votes?limit=, and GET /api/v1/bots/votes (top.gg-style clients without an
 * id): the newest votes from the append-only log, {user_id, voted_at} only. `limit` is clamped to
 * 1..100 and anything that is not a number means the default, 50; it is never a 400.
 */
import { clampLimit, type VotesResponse } from "@botdir/schema";
import { sendJson } from "@botdir/service-kit";
import type { Request, Response, Router } from "express";
import type { ApiContext } from "../context.js";
import { admit, answeringRefusals, countConfirmed, limitFirst } from "../http/access.js";
import { allowOnly } from "../http/methods.js";
import { requireTokenHash } from "../services/auth.js";
import { listVotes } from "../services/bots.js";

export const VOTES_PATH = "/api/v1/bots/:id/votes";
export const VOTES_ALIAS_PATH = "/api/v1/bots/votes";

export function registerVotes(router: Router, ctx: ApiContext): void {
  const handler = answeringRefusals(async (req: Request<{ id?: string }>, res: Response) => {
    const tokenHash = requireTokenHash(req);
    const limit = clampLimit(req.query.limit);
    // Limited: refused after authentication alone; unknown token: no window opened in Redis.
    const first = await limitFirst(ctx, res, "votes", tokenHash, req.params.id);
    const page = await listVotes(ctx.db, tokenHash, limit);
    const rate = await countConfirmed(ctx, "votes", tokenHash, first, page?.botId ?? null);
    admit(res, { tokenBotId: page?.botId ?? null, pathId: req.params.id, rate });
    const body: VotesResponse = { votes: page?.votes ?? [] };
    sendJson(res, body);
  });
  router.get(VOTES_ALIAS_PATH, handler);
  router.get(VOTES_PATH, handler);
  allowOnly(router, VOTES_ALIAS_PATH, ["GET"]);
  allowOnly(router, VOTES_PATH, ["GET"]);
}
