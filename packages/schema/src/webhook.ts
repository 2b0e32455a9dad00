import { z } from "zod";

export const WEBHOOK_EVENT = "vote.create" as const;
export const WEBHOOK_USER_AGENT = "BotDirectory-Webhook/1";
export const WEBHOOK_HEADERS = {
  event: "X-Webhook-Event",
  delivery: "X-Webhook-Delivery",
  signature: "X-Webhook-Signature-256",
  /** The W3C trace id (32 lowercase hex) of the delivery's trace; not signed (docs/tracing.md). */
  trace: "X-Webhook-Trace",
} as const;
export const WEBHOOK_MAX_ATTEMPTS = 5;
/** Delays before retries 1..4: 1 min, 5 min, 30 min, 2 h. */
export const WEBHOOK_RETRY_DELAYS_MS = [60_000, 300_000, 1_800_000, 7_200_000] as const;
export const WEBHOOK_TIMEOUT_MS = 10_000;

export const WebhookPayload = z.object({
  event: z.literal(WEBHOOK_EVENT),
  bot_id: z.string(),
  user_id: z.string(),
  voted_at: z.iso.datetime(),
  query: z.record(z.string(), z.string()).optional().meta({
    description:
      "The vote page's query string the site passed when the vote was cast (a flat object of strings); absent when none was given.",
  }),
});
export type WebhookPayload = z.infer<typeof WebhookPayload>;
