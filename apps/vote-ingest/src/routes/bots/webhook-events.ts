import { parseOrThrow } from "@botdir/schema";
import { requireJson } from "@botdir/service-kit";
import type { Router } from "express";
import { SetWebhookEventsBody } from "../../schemas.js";
import type { Listings } from "../../services/listings.js";
import { botIdParam } from "./params.js";

/** PUT /internal/v1/bots/:id/webhook/events sets the events the webhook receives. */
export function registerWebhookEvents(router: Router, listings: Listings): void {
  router.put("/:id/webhook/events", requireJson(), async (req, res) => {
    const id = botIdParam(req);
    const body = parseOrThrow(SetWebhookEventsBody, req.body);
    res.json(await listings.setWebhookEvents(id, body.events));
  });
}
