import { BotId, parseOrThrow, requireJson } from "@botdir/schema";
import type { Router } from "express";
import { z } from "zod";
import type { Listings } from "../../services/listings.js";

/** Unknown fields are refused, so a typo such as `aprove` cannot silently submit a pending bot. */
export const CreateBotBody = z.strictObject({
  id: BotId,
  approve: z.boolean().optional(),
});

/** POST /internal/v1/bots: submits a bot (pending), or approves it at once with `approve: true`. */
export function registerCreateBot(router: Router, listings: Listings): void {
  router.post("/", requireJson(), async (req, res) => {
    const body = parseOrThrow(CreateBotBody, req.body);
    const bot = await listings.createBot(body.id, { approve: body.approve ?? false });
    res.status(201).json(bot);
  });
}
