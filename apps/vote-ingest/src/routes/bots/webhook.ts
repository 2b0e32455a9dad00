import { parseOrThrow } from "@botdir/schema";
import { requireJson } from "@botdir/service-kit";
import type { Router } from "express";
import { SetWebhookBody } from "../../schemas.js";
import type { Listings } from "../../services/listings.js";
import { botIdParam } from "./params.js";

/**
 * PUT /internal/v1/bots/:id/webhook sets the URL and returns a new secret (shown once);
 * DELETE removes URL and secret.
 */
export function registerWebhook(router: Router, listings: Listings): void {
  router.put("/:id/webhook", requireJson(), async (req, res) => {
    const id = botIdParam(req);
    const body = parseOrThrow(SetWebhookBody, req.body);
    const result = await listings.setWebhook(id, body.url);
    res.setHeader("Cache-Control", "no-store");
    res.json(result);
  });

  router.delete("/:id/webhook", async (req, res) => {
    res.json(await listings.clearWebhook(botIdParam(req)));
  });
}
