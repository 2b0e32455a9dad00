import { z } from "zod";

/** The event sent when a vote is cast. */
export const WEBHOOK_EVENT = "vote.create" as const;
/** The event sent when a vote's 12-hour window ends: the user can vote again. */
export const VOTE_AVAILABLE_EVENT = "vote.available" as const;
/** Every event a webhook can subscribe to. */
export const WEBHOOK_EVENTS = [WEBHOOK_EVENT, VOTE_AVAILABLE_EVENT] as const;
export const WebhookEventName = z.enum(WEBHOOK_EVENTS);
export type WebhookEventName = z.infer<typeof WebhookEventName>;
/** What a webhook receives when no events were chosen. */
export const DEFAULT_WEBHOOK_EVENTS: readonly WebhookEventName[] = [WEBHOOK_EVENT];
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

/** The body of a `vote.available` request: the vote whose window ended, and when it ended. */
export const VoteAvailablePayload = z.object({
  event: z.literal(VOTE_AVAILABLE_EVENT),
  bot_id: z.string(),
  user_id: z.string(),
  voted_at: z.iso.datetime(),
  available_at: z.iso.datetime().meta({ description: "voted_at + 12 hours: the user can vote again." }),
});
export type VoteAvailablePayload = z.infer<typeof VoteAvailablePayload>;

/** Any delivery's body; `event` tells them apart. */
export const WebhookEventPayload = z.discriminatedUnion("event", [WebhookPayload, VoteAvailablePayload]);
export type WebhookEventPayload = z.infer<typeof WebhookEventPayload>;
