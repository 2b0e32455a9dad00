/**
 * GET /api/v1/bots/{id}/check?userId=, and GET /api/v1/bots/check?userId= (top.gg-style clients
 * without an id). The hot path: the limiter's single Redis round trip (counting an existing
 * window), then one query that both authenticates the token and reads the user's vote window (both
 * shared with the concurrent requests of the same event-loop turn); there is no separate token
 * lookup and no token cache. A limited request runs no window query (limitFirst), and an unknown
 * token opens no window in Redis (countConfirmed).
 */
import { CheckQuery, parseOrThrow, USER_ID_PATTERN, type VoteCheckResult } from "@botdir/schema";
import { sendJson } from "@botdir/service-kit";
import type { Request, Response, Router } from "express";
import type { ApiContext } from "../context.js";
import { admit, answeringRefusals, countConfirmed, limitFirst } from "../http/access.js";
import { allowOnly } from "../http/methods.js";
import { requireTokenHash } from "../services/auth.js";
import { toVoteCheck } from "../services/bots.js";

export const CHECK_PATH = "/api/v1/bots/:id/check";
export const CHECK_ALIAS_PATH = "/api/v1/bots/check";

/** The query's userId when CheckQuery accepts it (the first of repeated values), else null. */
function validUserId(query: unknown): string | null {
  const value = (query as { userId?: unknown }).userId;
  const first = Array.isArray(value) ? value[0] : value;
  return typeof first === "string" && USER_ID_PATTERN.test(first) ? first : null;
}

export function registerCheck(router: Router, ctx: ApiContext): void {
  const handler = answeringRefusals(async (req: Request<{ id?: string }>, res: Response) => {
    const tokenHash = requireTokenHash(req);
    const userId = validUserId(req.query);
    const first = await limitFirst(ctx, res, "check", tokenHash, req.params.id);
    const row = await ctx.voteWindow({ tokenHash, userId });
    const rate = await countConfirmed(ctx, "check", tokenHash, first, row?.botId ?? null);
    admit(res, { tokenBotId: row?.botId ?? null, pathId: req.params.id, rate });
    // Only an invalid query goes through zod, for the sentence that names the problem.
    if (userId === null) parseOrThrow(CheckQuery, req.query, "The query");
    const body: VoteCheckResult = toVoteCheck(row?.votedAt ?? null, ctx.clock.now());
    sendJson(res, body);
  });
  router.get(CHECK_ALIAS_PATH, handler);
  router.get(CHECK_PATH, handler);
  allowOnly(router, CHECK_ALIAS_PATH, ["GET"]);
  allowOnly(router, CHECK_PATH, ["GET"]);
}
