import type { Router } from "express";
import type { Listings } from "../../services/listings.js";
import { botIdParam } from "./params.js";

/** POST /internal/v1/bots/:id/token: a new API token, shown once; the old one stops working. */
export function registerRotateToken(router: Router, listings: Listings): void {
  router.post("/:id/token", async (req, res) => {
    const result = await listings.rotateToken(botIdParam(req));
    res.setHeader("Cache-Control", "no-store");
    res.json(result);
  });
}
