import { inContext, requestTrace } from "@botdir/service-kit";
import type { Router } from "express";
import type { Listings } from "../../services/listings.js";
import { botIdParam } from "./params.js";

/**
 * POST /internal/v1/bots/:id/webhook/recover {since, until?}: sends vote.create again for every
 * undelivered vote of the window (202 with the recovery's id and count); 409 while the webhook is
 * disabled or a recovery over an overlapping window runs. GET …/webhook/recoveries/:recoveryId:
 * its counts (queued, delivered, failed, pending).
 */
export function registerRecover(router: Router, listings: Listings): void {
  router.post("/:id/webhook/recover", async (req, res) => {
    // In the request's trace: every recovered delivery's new trace links to it (docs/tracing.md).
    const result = await inContext(requestTrace(res), () => listings.recover(botIdParam(req), req.body));
    res.setHeader("Cache-Control", "no-store");
    res.status(202).json(result);
  });

  router.get("/:id/webhook/recoveries/:recoveryId", async (req, res) => {
    const result = await listings.getRecovery(botIdParam(req), String(req.params.recoveryId));
    res.setHeader("Cache-Control", "no-store");
    res.json(result);
  });
}
