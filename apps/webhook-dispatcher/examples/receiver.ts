/**
 * A vote webhook receiver for bot owners, on @botdir/sdk (docs/webhooks.md):
 *
 *   WEBHOOK_SECRET=<the secret shown with your webhook URL> PORT=8080 npx tsx examples/receiver.ts
 *
 * `expressWebhook` reads the raw body itself, verifies the signature (Standard Webhooks, any of the
 * secrets given: list the new and the old one, comma-separated, during a rotation), runs `onVote`
 * and then answers 204 (500 when it throws, so the vote is delivered again), once per delivery id.
 */
import { pathToFileURL } from "node:url";
import { expressWebhook, type WebhookReceiverOptions } from "@botdir/sdk";
import express, { type Express } from "express";

export function createReceiver(options: WebhookReceiverOptions): Express {
  const app = express();
  app.disable("x-powered-by");
  app.post("/webhooks/votes", expressWebhook(options)); // before any express.json()
  return app;
}

// Run directly: `npx tsx examples/receiver.ts`.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const secrets = process.env.WEBHOOK_SECRET?.split(",").filter(Boolean) ?? [];
  if (secrets.length === 0) {
    console.error("Set WEBHOOK_SECRET to your bot's webhook secret.");
    process.exit(1);
  }
  const port = Number(process.env.PORT ?? 8080);
  const app = createReceiver({
    secret: secrets,
    onVote: (vote, { deliveryId }) =>
      console.log(
        `vote from ${vote.user_id} for ${vote.bot_id} at ${vote.voted_at} (delivery ${deliveryId})`,
      ),
  });
  app.listen(port, () => console.log(`listening on http://localhost:${port}/webhooks/votes`));
}
