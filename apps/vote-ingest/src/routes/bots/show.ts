import type { Router } from "express";
import type { Listings } from "../../services/listings.js";
import { botIdParam } from "./params.js";

/** GET /internal/v1/bots/:id: the listing as the edit page shows it (no token, no secret). */
export function registerShowBot(router: Router, listings: Listings): void {
  router.get("/:id", async (req, res) => {
    res.setHeader("Cache-Control", "no-store");
    res.json(await listings.getBot(botIdParam(req)));
  });
}
