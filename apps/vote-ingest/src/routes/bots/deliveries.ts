import type { Router } from "express";
import type { Listings } from "../../services/listings.js";
import { botIdParam } from "./params.js";

/** GET /internal/v1/bots/:id/webhook/deliveries: the last ten attempts, newest first. */
export function registerDeliveries(router: Router, listings: Listings): void {
  router.get("/:id/webhook/deliveries", async (req, res) => {
    res.setHeader("Cache-Control", "no-store");
    res.json(await listings.listAttempts(botIdParam(req)));
  });
}
