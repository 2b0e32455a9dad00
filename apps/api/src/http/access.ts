import type { IncomingMessage, ServerResponse } from "node:http";
import { ApiError } from "@botdir/schema";
import { sendApiError } from "@botdir/service-kit";
import type { Request, Response } from "express";
import type { ApiContext } from "../context.js";
import { botNotFound, unauthorized } from "../services/auth.js";
import {
  type LimitedEndpoint,
  type NewWindow,
  type RateDecision,
  rateLimitedError,
  setRateLimitHeaders,
  toSeconds,
} from "../services/ratelimit.js";
import { type FloodBudget, overloaded } from "./flood-budget.js";

/**
 * Applies the spec's order of refusals to an authenticated request: 401 (unknown token), then 404
 * (the path id is not the token's bot: another bot's, unknown, or not an id; one identical body),
 * then 429. RateLimit-* headers go on every answer after the token is known, 404 included (they
 * describe the token's own budget). Returns the token's bot id when the request may proceed.
 */
export function admit(
  res: ServerResponse,
  input: { tokenBotId: string | null; pathId: string | undefined; rate: RateDecision },
): string {
  const { tokenBotId, pathId, rate } = input;
  if (tokenBotId === null) throw unauthorized();
  setRateLimitHeaders(res, rate);
  if (pathId !== undefined && pathId !== tokenBotId) throw botNotFound();
  if (rate.kind === "limited") throw rateLimitedError(rate.resetSeconds);
  return tokenBotId;
}

/**
 * The first step of every authenticated endpoint, before any body byte or any other query: counts
 * the request against the token's window if one exists (an unknown token writes nothing to Redis).
 * Over the limit, the request is authenticated alone (one batched token lookup) and refused in the
 * spec's order (401, 404, 429) with no other PostgreSQL work. Otherwise returns the decision;
 * `new` means the token has not been confirmed nor counted yet (see countConfirmed).
 *
 * With a fresh token set (ctx.tokens), two refusals cost no PostgreSQL or Redis work: a token that
 * is not in the set is a 401 once the set's shared barrier confirms it, and a token whose current
 * window Redis already reported over its limit is refused from the in-process note (limit-notes.ts)
 * until that window resets. A token in the set still goes to PostgreSQL (revocation stays exact);
 * no set, a set not known to be fresh, or a barrier that did not come back in time, means the
 * database path (PostgreSQL decides the token).
 */
export async function limitFirst(
  ctx: ApiContext,
  res: ServerResponse,
  endpoint: LimitedEndpoint,
  tokenHash: string,
  pathId: string | undefined,
): Promise<RateDecision | NewWindow> {
  const barrier = refuseWithoutIo(ctx, res, endpoint, tokenHash, pathId);
  if (barrier !== undefined) await barrier;
  const rate = await ctx.limiter.consumeExisting(endpoint, tokenHash);
  if (rate.kind === "limited") {
    const botId = await ctx.authenticate(tokenHash);
    if (botId !== null && ctx.tokens !== null) {
      ctx.limitNotes.note(endpoint, tokenHash, { botId, limit: rate.limit, resetMs: rate.resetMs });
    }
    admit(res, { tokenBotId: botId, pathId, rate });
  }
  return rate;
}

/**
 * The refusals decided without PostgreSQL or Redis, from the fresh token set and the over-limit
 * notes: the 401 (a token not in the set, once its barrier is back: TokenSet.confirmAbsent), or for
 * a noted token the 404 (not its bot) or the 429 (with its RateLimit-* headers); returns when they
 * cannot decide. A token the set holds is decided synchronously (undefined: nothing to wait for);
 * a miss returns the promise of its barrier, which rejects with the 401 or resolves when the
 * caller must go on. The first step of limitFirst, and all of the early refusals
 * (early-refusals.ts), which run it before Express with the flood budget: there a miss waits for
 * its barrier only within the budget, and is answered 503 (thrown synchronously) past it.
 */
export function refuseWithoutIo(
  ctx: Pick<ApiContext, "tokens" | "limitNotes">,
  res: ServerResponse,
  endpoint: LimitedEndpoint,
  tokenHash: string,
  pathId: string | undefined,
  flood?: FloodBudget | null,
): Promise<void> | undefined {
  const tokens = ctx.tokens;
  const known = tokens === null ? "unknown" : tokens.lookup(tokenHash);
  if (known === "present") refuseNoted(ctx, res, endpoint, tokenHash, pathId);
  if (known !== "missing" || tokens === null) return undefined;
  // A miss needs the barrier's I/O before its 401: it waits under the flood budget, or is shed.
  if (flood && !flood.enter("unknown_token")) throw overloaded();
  const confirmed = tokens.confirmAbsent(tokenHash);
  if (flood) void confirmed.finally(() => flood.leave("unknown_token"));
  return confirmed.then((confirmed) => {
    if (confirmed === "absent") throw unauthorized();
    if (confirmed === "present") refuseNoted(ctx, res, endpoint, tokenHash, pathId);
  });
}

/** The 404 or 429 of a token the set holds whose window an over-limit note covers. */
function refuseNoted(
  ctx: Pick<ApiContext, "limitNotes">,
  res: ServerResponse,
  endpoint: LimitedEndpoint,
  tokenHash: string,
  pathId: string | undefined,
): void {
  const note = ctx.limitNotes.find(endpoint, tokenHash);
  if (note === null) return;
  const resetSeconds = toSeconds(note.resetMs);
  admit(res, {
    tokenBotId: note.botId,
    pathId,
    rate: { kind: "limited", limit: note.limit, remaining: 0, resetSeconds, resetMs: note.resetMs },
  });
}

/**
 * Once PostgreSQL has answered for the token (`botId`, null when unknown: 401): a token new to its
 * window is counted now, which opens the window. The first request of a window costs this second
 * Redis round trip; the others are counted by limitFirst alone.
 */
export async function countConfirmed(
  ctx: ApiContext,
  endpoint: LimitedEndpoint,
  tokenHash: string,
  rate: RateDecision | NewWindow,
  botId: string | null,
): Promise<RateDecision> {
  if (botId === null) throw unauthorized();
  return rate.kind === "new" ? ctx.limiter.consume(endpoint, tokenHash, rate) : rate;
}

/** Bodies above this that a refusal leaves unread are not drained: the connection is closed. */
const DRAIN_UNREAD_MAX_BYTES = 64 * 1024;

/**
 * For a refusal decided before the body was read: Node would read and discard the rest of the
 * body to keep the connection alive; for a large or unsized body, close the connection instead.
 */
export function closeIfBodyUnread(req: IncomingMessage, res: ServerResponse): void {
  if (req.complete || res.headersSent) return;
  const length = Number(req.headers["content-length"] ?? 0);
  if (req.headers["transfer-encoding"] !== undefined || length > DRAIN_UNREAD_MAX_BYTES) {
    res.setHeader("Connection", "close");
  }
}

/**
 * Wraps a hot-path handler so its refusals (any 4xx ApiError: 401, 404, 429, 400) are answered
 * on the spot instead of through Express's error path, which tries every later route layer before
 * it reaches the error middleware: the refusals are the cheap answers. 5xx and anything else
 * still go to the one error middleware (which logs them).
 */
export function answeringRefusals<Req extends Request>(
  handler: (req: Req, res: Response) => Promise<void>,
): (req: Req, res: Response) => Promise<void> {
  return async (req, res) => {
    try {
      await handler(req, res);
    } catch (error) {
      if (error instanceof ApiError && error.status < 500) sendApiError(res, error);
      else throw error;
    }
  };
}
