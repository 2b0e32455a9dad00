import { toIso } from "@botdir/db";
import { WEBHOOK_EVENT, WEBHOOK_HEADERS, WEBHOOK_USER_AGENT, type WebhookPayload } from "@botdir/schema";
import { sign, standardHeaders } from "@botdir/signing";
import type { WebhookRequest } from "./http-client.js";

export interface DeliveryContent {
  deliveryId: string;
  url: string;
  /** The webhook secret in clear: sent verbatim as Authorization and used as the HMAC key. */
  secret: string;
  botId: string;
  userId: string;
  votedAt: Date;
  /** The secret before a rotation, during its overlap: it signs `webhook-signature` too. */
  previousSecret?: string | null;
  /** When this attempt is signed: `webhook-timestamp`. */
  signedAt: Date;
}

/**
 * The exact request of one attempt. The body is serialised once, and those bytes are both signed
 * and sent, so the signature always matches what the receiver reads off the wire. Besides the spec's
 * headers it carries the Standard Webhooks headers (webhook-id = the delivery id, webhook-timestamp,
 * webhook-signature under the current secret and, during a rotation's overlap, the previous one);
 * Authorization and X-Webhook-Signature-256 always use the current secret.
 */
export function buildDeliveryRequest(content: DeliveryContent): WebhookRequest {
  const payload: WebhookPayload = {
    event: WEBHOOK_EVENT,
    bot_id: content.botId,
    user_id: content.userId,
    voted_at: toIso(content.votedAt),
  };
  const body = Buffer.from(JSON.stringify(payload), "utf8");
  return {
    url: content.url,
    body,
    headers: {
      "Content-Type": "application/json",
      "User-Agent": WEBHOOK_USER_AGENT,
      Authorization: content.secret,
      [WEBHOOK_HEADERS.event]: WEBHOOK_EVENT,
      [WEBHOOK_HEADERS.delivery]: content.deliveryId,
      [WEBHOOK_HEADERS.signature]: sign(content.secret, body),
      ...standardHeaders(
        content.previousSecret ? [content.secret, content.previousSecret] : [content.secret],
        content.deliveryId,
        content.signedAt,
        body,
      ),
    },
  };
}
