import { ApiError, isBotId } from "@botdir/schema";
import type { Request, Response } from "express";
import type { ApiContext } from "../context.js";
import { botNotFound, findBotIdByToken, requireTokenHash } from "../services/auth.js";
import type { WriteResult } from "../services/bots.js";
import type { LimitedEndpoint } from "../services/ratelimit.js";
import { admit } from "./access.js";
import { bodyError } from "./json-body.js";

export interface WriteSpec<T> {
  endpoint: LimitedEndpoint;
  /** The bot id in the path, or undefined on a route that takes the token's own bot. */
  pathId: string | undefined;
  /** Parses the body; throws the 400 ApiError naming the first problem. */
  parse(body: unknown): T;
  /** The authenticating write: null when the token does not own `botId` (null = the token's bot). */
  write(tokenHash: string, botId: string | null, input: T): Promise<WriteResult | null>;
}

/**
 * The write endpoints' flow. Happy path: one Redis round trip (limiter), then one statement that
 * authenticates and writes. Only a request that already failed pays an extra token lookup, which
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
  const rate = await ctx.limiter.consume(spec.endpoint, tokenHash);

  let parsed: { input: T } | undefined;
  let invalid: ApiError | undefined = bodyError(res);
  if (!invalid && rate.kind !== "limited") {
    try {
      parsed = { input: spec.parse(req.body) };
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      invalid = error;
    }
  }
  const refuse = async (fallback: ApiError | undefined): Promise<never> => {
    admit(res, { tokenBotId: await findBotIdByToken(ctx.db, tokenHash), pathId, rate });
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
