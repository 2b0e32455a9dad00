/**
 * POST /api/v1/bots/{id}/webhook/deliveries/{deliveryId}/redeliver: a fresh series of five attempts
 * of one of the bot's delivered or failed deliveries, same delivery id and body bytes. The API has
 * no queue producer: the delivery is left un-handed-off and vote-ingest's outbox relay hands it to
 * the dispatcher at its next tick (OUTBOX_RELAY_INTERVAL_MS, 1 s by default). The answer order is
 * the other endpoints': 401, 404 (bot), 429, then 404 (delivery) / 409. The new series belongs to
 * this request's trace (`webhook.redeliver`, linked to the delivery's previous trace), which the
 * row keeps for the relay's hand-off and the attempts (docs/tracing.md).
 */
import { redeliver } from "@botdir/db";
import { type RedeliverResponse, redeliveryRefusal } from "@botdir/schema";
import { activeTraceparent, inContext, inSpan, linkTo, requestTrace, sendJson } from "@botdir/service-kit";
import type { Request, Response, Router } from "express";
import type { ApiContext } from "../context.js";
import { admit, countConfirmed, limitFirst } from "../http/access.js";
import { allowOnly } from "../http/methods.js";
import { requireTokenHash } from "../services/auth.js";

export const REDELIVER_PATH = "/api/v1/bots/:id/webhook/deliveries/:deliveryId/redeliver";

export function registerRedeliver(router: Router, ctx: ApiContext): void {
  router.post(REDELIVER_PATH, async (req: Request<{ id: string; deliveryId: string }>, res: Response) => {
    const tokenHash = requireTokenHash(req);
    // The shared refusal path: limited → no query; unknown token → 401 without a Redis key.
    const first = await limitFirst(ctx, res, "redeliver", tokenHash, req.params.id);
    const tokenBotId = await ctx.authenticate(tokenHash);
    const rate = await countConfirmed(ctx, "redeliver", tokenHash, first, tokenBotId);
    const botId = admit(res, { tokenBotId, pathId: req.params.id, rate });
    const deliveryId = req.params.deliveryId;
    // In the request's trace (a new one, linked to the delivery's previous trace): the new series
    // keeps it (docs/tracing.md).
    const result = await inContext(requestTrace(res), () =>
      inSpan(
        "webhook.redeliver",
        { needsTrace: true, attributes: { "botdir.bot_id": botId, "botdir.delivery_id": deliveryId } },
        async (span) => {
          const started = await redeliver(ctx.db, botId, deliveryId, ctx.clock.now(), activeTraceparent());
          if (started.kind === "redelivered") linkTo(span, started.previousTraceparent);
          return started;
        },
      ),
    );
    if (result.kind !== "redelivered") throw redeliveryRefusal(result.kind);
    const body: RedeliverResponse = {
      deliveryId: result.delivery.id,
      state: "pending",
      series: result.series,
    };
    res.setHeader("Cache-Control", "no-store");
    sendJson(res, body, 202);
  });
  allowOnly(router, REDELIVER_PATH, ["POST"]);
}
