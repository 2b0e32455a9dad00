import type { Router } from "express";
import type { Listings } from "../../services/listings.js";
import { botIdParam } from "./params.js";

/** POST /internal/v1/bots/:id/approve */
export function registerApproveBot(router: Router, listings: Listings): void {
  router.post("/:id/approve", async (req, res) => {
    res.json(await listings.approveBot(botIdParam(req)));
  });
}
