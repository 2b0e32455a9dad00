import { methodNotAllowed, routeBase } from "@botdir/service-kit";
import express, { type Router } from "express";
import type { IngestDeps } from "../deps.js";
import { requireInternalKey } from "../internal-auth.js";
import { createListings } from "../services/listings.js";
import { registerApproveBot } from "./bots/approve.js";
import { registerCreateBot } from "./bots/create.js";
import { registerDeliveries } from "./bots/deliveries.js";
import { registerRecover } from "./bots/recover.js";
import { registerRedeliver } from "./bots/redeliver.js";
import { registerShowBot } from "./bots/show.js";
import { registerRotateToken } from "./bots/token.js";
import { registerWebhook } from "./bots/webhook.js";
import { registerWebhookEvents } from "./bots/webhook-events.js";
import { registerWebhookOwner } from "./bots/webhook-owner.js";

export const BOTS_PATH = "/internal/v1/bots";

export type BotManagementDeps = Pick<
  IngestDeps,
  | "db"
  | "clock"
  | "internalApiKey"
  | "secretBox"
  | "allowPrivateTargets"
  | "webhookResolver"
  | "deliveryQueue"
  | "webhookSecretOverlapMs"
  | "webhookTestsPerMinute"
  | "webhookDnsTimeoutMs"
>;

/**
 * Listing management for the site's edit page, under /internal/v1/bots, behind INTERNAL_API_KEY.
 * The key is checked before the body is read.
 */
export function registerBotManagement(router: Router, deps: BotManagementDeps): void {
  const listings = createListings({
    db: deps.db,
    clock: deps.clock,
    secretBox: deps.secretBox ?? null,
    allowPrivateTargets: deps.allowPrivateTargets ?? false,
    ...(deps.webhookResolver === undefined ? {} : { resolver: deps.webhookResolver }),
    ...(deps.deliveryQueue ? { deliveryQueue: deps.deliveryQueue } : {}),
    ...(deps.webhookSecretOverlapMs === undefined ? {} : { secretOverlapMs: deps.webhookSecretOverlapMs }),
    ...(deps.webhookTestsPerMinute === undefined ? {} : { testEventsPerMinute: deps.webhookTestsPerMinute }),
    ...(deps.webhookDnsTimeoutMs === undefined ? {} : { dnsTimeoutMs: deps.webhookDnsTimeoutMs }),
  });
  const bots = express.Router();
  bots.use(routeBase(BOTS_PATH)); // route labels of metrics and logs: "/internal/v1/bots/:id/..."
  bots.use(requireInternalKey(deps.internalApiKey));
  bots.use(express.json({ limit: "16kb" }));

  registerCreateBot(bots, listings);
  registerApproveBot(bots, listings);
  registerRotateToken(bots, listings);
  registerWebhook(bots, listings);
  registerWebhookEvents(bots, listings);
  registerWebhookOwner(bots, listings);
  registerDeliveries(bots, listings);
  registerRedeliver(bots, listings);
  registerRecover(bots, listings);
  registerShowBot(bots, listings);

  bots.all("/", methodNotAllowed(["POST"]));
  bots.all("/:id", methodNotAllowed(["GET"]));
  bots.all("/:id/approve", methodNotAllowed(["POST"]));
  bots.all("/:id/token", methodNotAllowed(["POST"]));
  bots.all("/:id/webhook", methodNotAllowed(["PUT", "DELETE"]));
  bots.all("/:id/webhook/deliveries", methodNotAllowed(["GET"]));
  bots.all("/:id/webhook/deliveries/:deliveryId/redeliver", methodNotAllowed(["POST"]));
  bots.all("/:id/webhook/events", methodNotAllowed(["PUT"]));
  bots.all("/:id/webhook/secret", methodNotAllowed(["POST"]));
  bots.all("/:id/webhook/test", methodNotAllowed(["POST"]));
  bots.all("/:id/webhook/enable", methodNotAllowed(["POST"]));
  bots.all("/:id/webhook/recover", methodNotAllowed(["POST"]));
  bots.all("/:id/webhook/recoveries/:recoveryId", methodNotAllowed(["GET"]));

  router.use(BOTS_PATH, bots);
}
