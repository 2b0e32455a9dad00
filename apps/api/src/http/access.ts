import type { Response } from "express";
import { botNotFound, unauthorized } from "../services/auth.js";
import { type RateDecision, rateLimitedError, setRateLimitHeaders } from "../services/ratelimit.js";

/**
 * Applies the spec's order of refusals to an authenticated request: 401 (unknown token), then 404
 * (the path id is not the token's bot: another bot's, unknown, or not an id; one identical body),
 * then 429. RateLimit-* headers go on every answer after the token is known, 404 included (they
 * describe the token's own budget). Returns the token's bot id when the request may proceed.
 */
export function admit(
  res: Response,
  input: { tokenBotId: string | null; pathId: string | undefined; rate: RateDecision },
): string {
  const { tokenBotId, pathId, rate } = input;
  if (tokenBotId === null) throw unauthorized();
  setRateLimitHeaders(res, rate);
  if (pathId !== undefined && pathId !== tokenBotId) throw botNotFound();
  if (rate.kind === "limited") throw rateLimitedError(rate.resetSeconds);
  return tokenBotId;
}
