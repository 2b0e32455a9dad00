import { parseOrThrow } from "@botdir/schema";
import { requireJson } from "@botdir/service-kit";
import type { Router } from "express";
import { CreateBotBody } from "../../schemas.js";
import type { Listings } from "../../services/listings.js";

/** POST /internal/v1/bots: submits a bot (pending), or approves it at once with `approve: true`. */
export function registerCreateBot(router: Router, listings: Listings): void {
  router.post("/", requireJson(), async (req, res) => {
    const body = parseOrThrow(CreateBotBody, req.body);
    const bot = await listings.createBot(body.id, { approve: body.approve ?? false });
    res.status(201).json(bot);
  });
}
