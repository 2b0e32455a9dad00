import { parseOrThrow } from "@botdir/schema";
import { inContext, requestTrace } from "@botdir/service-kit";
import type { Router } from "express";
import { TestEventBody } from "../../schemas.js";
import type { Listings } from "../../services/listings.js";
import { botIdParam } from "./params.js";

/**
 * POST /internal/v1/bots/:id/webhook/secret rotates the secret (shown once; the previous one signs
 * beside it for the overlap), …/webhook/test sends one signed `webhook.test` request (or, with
 * {event}, a sample vote.create or vote.available) now and answers with its outcome, …/webhook/enable re-enables a webhook disabled as dead or gone (410), and with {recoverSince}
 * recovers its undelivered votes since then.
 */
export function registerWebhookOwner(router: Router, listings: Listings): void {
  router.post("/:id/webhook/secret", async (req, res) => {
    const result = await listings.rotateSecret(botIdParam(req));
    res.setHeader("Cache-Control", "no-store");
    res.json(result);
  });

  router.post("/:id/webhook/test", async (req, res) => {
    // An optional body {event}: which event to send (default webhook.test).
    const id = botIdParam(req);
    const { event } = parseOrThrow(TestEventBody, req.body ?? {});
    res.setHeader("Cache-Control", "no-store");
    // In the request's trace: the test event carries its id (X-Webhook-Trace).
    res.json(await inContext(requestTrace(res), () => listings.sendTestEvent(id, event)));
  });

  router.post("/:id/webhook/enable", async (req, res) => {
    // An optional body {recoverSince}: re-enable and recover the votes since then in one call.
    const body: unknown = req.body;
    const recoverSince =
      body && typeof body === "object" && !Array.isArray(body)
        ? (body as Record<string, unknown>).recoverSince
        : undefined;
    res.json(
      await inContext(requestTrace(res), () =>
        listings.enableWebhook(botIdParam(req), recoverSince === undefined ? {} : { recoverSince }),
      ),
    );
  });
}
