import { ApiError, isBotId } from "@botdir/schema";
import type { Request, Response } from "express";
import type { ApiContext } from "../context.js";
import { botNotFound, requireTokenHash } from "../services/auth.js";
import type { WriteResult } from "../services/bots.js";
import type { LimitedEndpoint, RateDecision } from "../services/ratelimit.js";
import { admit, closeIfBodyUnread, countConfirmed, limitFirst } from "./access.js";
import { bodyError } from "./json-body.js";

export interface WriteSpec<T> {
  endpoint: LimitedEndpoint;
  /** The bot id in the path, or undefined on a route that takes the token's own bot. */
  pathId: string | undefined;
  /** Reads the JSON body (jsonBodyReader); called only once the request is admitted. */
  readBody(req: Request, res: Response): Promise<void>;
  /** Parses the body; throws the 400 ApiError naming the first problem. */
  parse(body: unknown): T;
  /** The authenticating write: null when the token does not own `botId` (null = the token's bot). */
  write(tokenHash: string, botId: string | null, input: T): Promise<WriteResult | null>;
}

/**
 * The write endpoints' flow. Happy path (the token's window exists and the fresh token set holds
 * the token): one Redis round trip (limiter), the body, then one statement that authenticates and
 * writes. Every other token is authenticated before a byte of its body is read (one batched
 * lookup; an unknown token: 401 with the body unread, no Redis key): a token new to its window,
 * and any token the token set cannot vouch for (no set, a set not known to be fresh, or a token
 * changed within its window), which covers the limiter failing open. A limited token is refused by
 * limitFirst, also unread. Only a request whose write then failed pays another token lookup, which
 * decides the answer in the spec's order: 401, 404, 429, then the 400/413 of the body.
 */
export async function authenticatedWrite<T>(
  ctx: ApiContext,
  req: Request,
  res: Response,
  spec: WriteSpec<T>,
): Promise<{ input: T; result: WriteResult }> {
  const tokenHash = requireTokenHash(req);
  const { pathId } = spec;
  let rate: RateDecision;
  try {
    const first = await limitFirst(ctx, res, spec.endpoint, tokenHash, pathId);
    if (first.kind === "new" || ctx.tokens?.lookup(tokenHash) !== "present") {
      const botId = await ctx.authenticate(tokenHash);
      rate = await countConfirmed(ctx, spec.endpoint, tokenHash, first, botId);
      admit(res, { tokenBotId: botId, pathId, rate });
    } else {
      rate = first;
    }
  } catch (error) {
    closeIfBodyUnread(req, res);
    throw error;
  }

  await spec.readBody(req, res);
  let parsed: { input: T } | undefined;
  let invalid: ApiError | undefined = bodyError(res);
  if (!invalid) {
    try {
      parsed = { input: spec.parse(req.body) };
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      invalid = error;
    }
  }
  const refuse = async (fallback: ApiError | undefined): Promise<never> => {
    admit(res, { tokenBotId: await ctx.authenticate(tokenHash), pathId, rate });
    throw fallback ?? botNotFound();
  };
  if (parsed === undefined) return refuse(invalid);

  // An id that is not an application id can never match; it is not even sent to the database.
  const result =
    pathId === undefined || isBotId(pathId)
      ? await spec.write(tokenHash, pathId ?? null, parsed.input)
      : null;
  if (result === null) return refuse(undefined);
  admit(res, { tokenBotId: result.botId, pathId, rate });
  return { input: parsed.input, result };
}
