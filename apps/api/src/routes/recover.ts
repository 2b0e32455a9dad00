/**
 * POST /api/v1/bots/{id}/webhook/recover {since, until?}: sends vote.create again for every vote of
 * the window whose delivery did not succeed (failed, or never made while the webhook was disabled);
 * 202 with the recovery's id and count. The API only writes the recovery row: vote-ingest's
 * recovery driver queues its votes in keyset batches. GET …/webhook/recoveries/{recoveryId}: its
 * counts. The answer order is the other endpoints': 401, 404 (bot), 429, then 400 / 404 / 409.
 */
import { getRecovery, startRecovery } from "@botdir/db";
import {
  ApiError,
  parseRecoverWindow,
  RECOVERY_MESSAGES,
  type RecoverResponse,
  type RecoveryResponse,
  recoveryRefusal,
} from "@botdir/schema";
import { activeTraceparent, inContext, inSpan, requestTrace, sendJson } from "@botdir/service-kit";
import type { Request, Response, Router } from "express";
import type { ApiContext } from "../context.js";
import { admit, closeIfBodyUnread, countConfirmed, limitFirst } from "../http/access.js";
import { bodyError, jsonBodyReader } from "../http/json-body.js";
import { allowOnly } from "../http/methods.js";
import { requireTokenHash } from "../services/auth.js";
import type { LimitedEndpoint } from "../services/ratelimit.js";

export const RECOVER_PATH = "/api/v1/bots/:id/webhook/recover";
export const RECOVERY_PATH = "/api/v1/bots/:id/webhook/recoveries/:recoveryId";

/** The limiter, then the token: the bot id the token may act for, or the spec's refusal. */
async function admitted(
  ctx: ApiContext,
  req: Request<{ id: string }>,
  res: Response,
  endpoint: LimitedEndpoint,
) {
  const tokenHash = requireTokenHash(req);
  const first = await limitFirst(ctx, res, endpoint, tokenHash, req.params.id);
  const tokenBotId = await ctx.authenticate(tokenHash);
  const rate = await countConfirmed(ctx, endpoint, tokenHash, first, tokenBotId);
  return admit(res, { tokenBotId, pathId: req.params.id, rate });
}

export function registerRecover(router: Router, ctx: ApiContext): void {
  const readBody = jsonBodyReader("4kb");
  router.post(RECOVER_PATH, async (req: Request<{ id: string }>, res: Response) => {
    let botId: string;
    try {
      botId = await admitted(ctx, req, res, "recover");
    } catch (error) {
      closeIfBodyUnread(req, res);
      throw error;
    }
    await readBody(req, res);
    const invalid = bodyError(res);
    if (invalid) throw invalid;
    const now = ctx.clock.now();
    const window = parseRecoverWindow(req.body, now);
    // In the request's trace: every recovered delivery's new trace links to it (docs/tracing.md).
    const result = await inContext(requestTrace(res), () =>
      inSpan("webhook.recover", { needsTrace: true, attributes: { "botdir.bot_id": botId } }, () =>
        startRecovery(ctx.db, botId, window, now, activeTraceparent()),
      ),
    );
    if (result.kind !== "started") throw recoveryRefusal(result);
    const body: RecoverResponse = { recoveryId: result.recoveryId, queued: result.queued };
    res.setHeader("Cache-Control", "no-store");
    sendJson(res, body, 202);
  });
  allowOnly(router, RECOVER_PATH, ["POST"]);

  router.get(RECOVERY_PATH, async (req: Request<{ id: string; recoveryId: string }>, res: Response) => {
    const botId = await admitted(ctx, req, res, "deliveries");
    const view = await getRecovery(ctx.db, botId, req.params.recoveryId);
    if (!view) throw new ApiError("not_found", RECOVERY_MESSAGES.notFound);
    const body: RecoveryResponse = view;
    res.setHeader("Cache-Control", "no-store");
    sendJson(res, body);
  });
  allowOnly(router, RECOVERY_PATH, ["GET"]);
}
