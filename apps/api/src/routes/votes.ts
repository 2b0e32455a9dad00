/**
 * GET /api/v1/bots/{id}/votes?limit=, and GET /api/v1/bots/votes (top.gg-style clients without an
 * id): the newest votes from the append-only log, {user_id, voted_at} only. `limit` is clamped to
 * 1..100 and anything that is not a number means the default, 50; it is never a 400.
 *
 * With `since` and/or `cursor` (catching up after downtime): the votes at or after `since` and
 * after the cursor's position (both apply when both are given), OLDEST first, with `nextCursor`
 * while more follow. Only votes older than VOTE_CURSOR_SETTLE_MS are listed this way, so that a
 * vote committed late can never fall behind a cursor. Same rate limit as the plain list; a bad
 * `since` or cursor (a date outside years 0001..9999 included), or another bot's cursor, is a 400
 * after 401/404/429, decided before the log is read.
 */
import {
  ApiError,
  clampLimit,
  parseOrThrow,
  VOTE_CURSOR_SETTLE_MS,
  type VotesPage,
  VotesPageQuery,
  type VotesResponse,
} from "@botdir/schema";
import { sendJson } from "@botdir/service-kit";
import type { Request, Response, Router } from "express";
import type { ApiContext } from "../context.js";
import { admit, answeringRefusals, countConfirmed, limitFirst } from "../http/access.js";
import { allowOnly } from "../http/methods.js";
import { requireTokenHash } from "../services/auth.js";
import { listVotes, listVotesSince, type VoteLogRange } from "../services/bots.js";
import type { NewWindow, RateDecision } from "../services/ratelimit.js";
import {
  decodeVoteCursor,
  encodeVoteCursor,
  requireOwnCursor,
  type VoteCursor,
} from "../services/vote-cursor.js";

export const VOTES_PATH = "/api/v1/bots/:id/votes";
export const VOTES_ALIAS_PATH = "/api/v1/bots/votes";

interface PageRequest {
  cursor: VoteCursor | null;
  range: Omit<VoteLogRange, "until">;
}

/** The paging parameters, or the 400 naming the first problem. */
function readPageRequest(query: unknown): PageRequest {
  const parsed = parseOrThrow(VotesPageQuery, query, "The query");
  const cursor = parsed.cursor === undefined ? null : decodeVoteCursor(parsed.cursor);
  return {
    cursor,
    range: {
      since: parsed.since === undefined ? null : new Date(parsed.since),
      after: cursor === null ? null : { votedAtMs: cursor.votedAtMs, id: cursor.id },
      limit: parsed.limit,
    },
  };
}

/**
 * A cursor is bound to one bot's log, and is refused before that log is read. With an id in the
 * path, the query that follows serves only that bot (admit's 404 otherwise), so a cursor of another
 * id is refused now; without one (top.gg-style route), the token's bot is looked up first. An
 * unknown token passes here and gets its 401 from the query.
 */
async function requireCursorOfThisLog(
  ctx: ApiContext,
  cursor: VoteCursor | null,
  tokenHash: string,
  pathId: string | undefined,
): Promise<void> {
  if (cursor === null) return;
  const botId = pathId ?? (await ctx.authenticate(tokenHash));
  if (botId !== null) requireOwnCursor(cursor, botId);
}

/** The since/cursor answer, after limitFirst (`first`): a page oldest first, with nextCursor. */
async function sendVotePage(
  ctx: ApiContext,
  req: Request<{ id?: string }>,
  res: Response,
  tokenHash: string,
  first: RateDecision | NewWindow,
): Promise<void> {
  let request: PageRequest;
  try {
    request = readPageRequest(req.query);
    await requireCursorOfThisLog(ctx, request.cursor, tokenHash, req.params.id);
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    // The 400 comes after 401, 404 and 429: the token is still looked up and counted.
    const botId = await ctx.authenticate(tokenHash);
    const rate = await countConfirmed(ctx, "votes", tokenHash, first, botId);
    admit(res, { tokenBotId: botId, pathId: req.params.id, rate });
    throw error;
  }
  const until = new Date(ctx.clock.now().getTime() - VOTE_CURSOR_SETTLE_MS);
  const page = await listVotesSince(ctx.db, tokenHash, { ...request.range, until });
  const rate = await countConfirmed(ctx, "votes", tokenHash, first, page?.botId ?? null);
  const botId = admit(res, { tokenBotId: page?.botId ?? null, pathId: req.params.id, rate });
  const body: VotesPage = { votes: page?.votes ?? [] };
  if (page?.next) body.nextCursor = encodeVoteCursor({ botId, ...page.next });
  sendJson(res, body);
}

export function registerVotes(router: Router, ctx: ApiContext): void {
  const handler = answeringRefusals(async (req: Request<{ id?: string }>, res: Response) => {
    const tokenHash = requireTokenHash(req);
    // Limited: refused after authentication alone; unknown token: no window opened in Redis.
    const first = await limitFirst(ctx, res, "votes", tokenHash, req.params.id);
    if (req.query.since !== undefined || req.query.cursor !== undefined) {
      return sendVotePage(ctx, req, res, tokenHash, first);
    }
    const limit = clampLimit(req.query.limit);
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
