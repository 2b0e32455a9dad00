import { toIso } from "@botdir/db";
import { WEBHOOK_EVENT, type WebhookPayload } from "@botdir/schema";
import { signedWebhookRequest } from "@botdir/webhook-targets";
import type { WebhookRequest } from "./http-client.js";

export interface DeliveryContent {
  deliveryId: string;
  url: string;
  /** The webhook secret in clear: sent verbatim as Authorization and used as the HMAC key. */
  secret: string;
  botId: string;
  userId: string;
  votedAt: Date;
  /** The vote page's query string (vote_log.query): sent as `query` when there is one. */
  query?: Readonly<Record<string, string>> | null;
  /** The secret before a rotation, during its overlap: it signs `webhook-signature` too. */
  previousSecret?: string | null;
}

/**
 * The exact request of one attempt: `vote.create`, signed as every webhook (signedWebhookRequest);
 * `signedAt` is when this attempt is signed (`webhook-timestamp`).
 */
export function buildDeliveryRequest(
  content: DeliveryContent,
  signedAt: Date,
  /** X-Webhook-Trace: the trace the attempt belongs to (the delivery's). */
  traceId: string | null = null,
): WebhookRequest {
  const payload: WebhookPayload = {
    event: WEBHOOK_EVENT,
    bot_id: content.botId,
    user_id: content.userId,
    voted_at: toIso(content.votedAt),
    ...(content.query ? { query: content.query } : {}),
  };
  const signing = {
    id: content.deliveryId,
    secret: content.secret,
    previousSecret: content.previousSecret ?? null,
    signedAt,
    traceId,
  };
  return { url: content.url, ...signedWebhookRequest(payload, signing) };
}
