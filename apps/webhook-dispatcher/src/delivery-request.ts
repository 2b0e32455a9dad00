import { toIso } from "@botdir/db";
import {
  VOTE_AVAILABLE_EVENT,
  VOTE_WINDOW_MS,
  WEBHOOK_EVENT,
  type WebhookEventName,
  type WebhookEventPayload,
} from "@botdir/schema";
import { signedWebhookRequest } from "@botdir/webhook-targets";
import type { WebhookRequest } from "./http-client.js";

export interface DeliveryContent {
  deliveryId: string;
  url: string;
  /** The webhook secret in clear: sent verbatim as Authorization and used as the HMAC key. */
  secret: string;
  /** `vote.create` (the default) or `vote.available`. */
  event?: WebhookEventName;
  botId: string;
  userId: string;
  votedAt: Date;
  /** The vote page's query string (vote_log.query): sent as `query` when there is one. */
  query?: Readonly<Record<string, string>> | null;
  /** The secret before a rotation, during its overlap: it signs `webhook-signature` too. */
  previousSecret?: string | null;
}

/**
 * The exact request of one attempt: the delivery's event (`vote.create`, or `vote.available` with
 * `available_at` = voted_at + 12 h), signed as every webhook (signedWebhookRequest);
 * `signedAt` is when this attempt is signed (`webhook-timestamp`).
 */
export function buildDeliveryRequest(
  content: DeliveryContent,
  signedAt: Date,
  /** X-Webhook-Trace: the trace the attempt belongs to (the delivery's). */
  traceId: string | null = null,
): WebhookRequest {
  const payload = deliveryPayload(content);
  const signing = {
    id: content.deliveryId,
    secret: content.secret,
    previousSecret: content.previousSecret ?? null,
    signedAt,
    traceId,
  };
  return { url: content.url, ...signedWebhookRequest(payload, signing) };
}

/** The body of a delivery: keys in this order, as docs/webhooks.md shows them. */
export function deliveryPayload(
  content: Pick<DeliveryContent, "event" | "botId" | "userId" | "votedAt" | "query">,
): WebhookEventPayload {
  const vote = { bot_id: content.botId, user_id: content.userId, voted_at: toIso(content.votedAt) };
  if (content.event !== VOTE_AVAILABLE_EVENT) {
    return { event: WEBHOOK_EVENT, ...vote, ...(content.query ? { query: content.query } : {}) };
  }
  const availableAt = new Date(content.votedAt.getTime() + VOTE_WINDOW_MS);
  return { event: VOTE_AVAILABLE_EVENT, ...vote, available_at: toIso(availableAt) };
}
