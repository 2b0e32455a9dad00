import { inContext, requestTrace } from "@botdir/service-kit";
import type { Router } from "express";
import type { Listings } from "../../services/listings.js";
import { botIdParam } from "./params.js";

/**
 * POST /internal/v1/bots/:id/webhook/deliveries/:deliveryId/redeliver: a fresh series of five
 * attempts of a delivered or failed delivery, same id and body. 409 while it is pending; one 404
 * for an unknown delivery, another bot's delivery and a delivery id that is not a UUID.
 */
export function registerRedeliver(router: Router, listings: Listings): void {
  router.post("/:id/webhook/deliveries/:deliveryId/redeliver", async (req, res) => {
    // In the request's trace: the new series belongs to it (docs/tracing.md).
    const result = await inContext(requestTrace(res), () =>
      listings.redeliver(botIdParam(req), String(req.params.deliveryId)),
    );
    res.setHeader("Cache-Control", "no-store");
    res.status(202).json(result);
  });
}
