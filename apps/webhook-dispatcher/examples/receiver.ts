/**
 * A vote webhook receiver for bot owners: verifies each delivery, answers 204 at once, and handles
 * each vote once.
 *
 *   WEBHOOK_SECRET=<the secret shown with your webhook URL> PORT=8080 npx tsx examples/receiver.ts
 *
 * Rules it follows (docs/webhooks.md):
 * 1. Verify X-Webhook-Signature-256 over the RAW body bytes (never re-serialised JSON), in
 *    constant time. express.raw keeps the bytes; JSON is parsed only after the check.
 * 2. Answer 2xx quickly (204 here); do the work afterwards. A reply later than 10 s is a failure
 *    and the vote is sent again.
 * 3. The same vote can arrive more than once: de-duplicate on X-Webhook-Delivery.
 */
import { pathToFileURL } from "node:url";
import { verify } from "@botdir/signing";
import express, { type Express } from "express";

export interface Vote {
  event: "vote.create";
  bot_id: string;
  user_id: string;
  voted_at: string;
}

export interface ReceiverOptions {
  /** The webhook secret of your bot (keep it out of source control). */
  secret: string;
  /** Your work: grant the perk, thank the voter... Runs after the 204 has been sent. */
  onVote: (vote: Vote, deliveryId: string) => void | Promise<void>;
  /** How many recent delivery ids to remember. Use a database or Redis when you run several copies. */
  rememberDeliveries?: number;
}

/** Remembers recent delivery ids, oldest forgotten first. */
class RecentIds {
  private readonly ids = new Set<string>();
  constructor(private readonly capacity: number) {}

  /** True the first time an id is seen. */
  add(id: string): boolean {
    if (this.ids.has(id)) return false;
    this.ids.add(id);
    if (this.ids.size > this.capacity) {
      const oldest = this.ids.values().next().value;
      if (oldest !== undefined) this.ids.delete(oldest);
    }
    return true;
  }
}

export function createReceiver(options: ReceiverOptions): Express {
  const seen = new RecentIds(options.rememberDeliveries ?? 10_000);
  const app = express();
  app.disable("x-powered-by");

  app.post("/webhooks/votes", express.raw({ type: "application/json", limit: "16kb" }), (req, res) => {
    const raw: Buffer = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
    // Constant-time HMAC check over the exact bytes received.
    if (!verify(options.secret, raw, req.get("X-Webhook-Signature-256"))) {
      res.status(401).json({ error: "Invalid signature." });
      return;
    }
    if (req.get("X-Webhook-Event") !== "vote.create") {
      res.status(204).end(); // an event this receiver does not handle: acknowledge and ignore
      return;
    }
    const deliveryId = req.get("X-Webhook-Delivery") ?? "";
    let vote: Vote;
    try {
      vote = JSON.parse(raw.toString("utf8")) as Vote;
    } catch {
      res.status(400).json({ error: "Invalid JSON body." });
      return;
    }

    res.status(204).end(); // acknowledge first...
    if (!seen.add(deliveryId)) return; // ...a repeat of a delivery already handled is a no-op
    setImmediate(() => {
      Promise.resolve(options.onVote(vote, deliveryId)).catch((error: unknown) => {
        console.error("vote handler failed", deliveryId, error);
      });
    });
  });

  return app;
}

// Run directly: `npx tsx examples/receiver.ts`.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const secret = process.env.WEBHOOK_SECRET;
  if (!secret) {
    console.error("Set WEBHOOK_SECRET to your bot's webhook secret.");
    process.exit(1);
  }
  const port = Number(process.env.PORT ?? 8080);
  const app = createReceiver({
    secret,
    onVote: (vote, deliveryId) => {
      console.log(
        `vote from ${vote.user_id} for ${vote.bot_id} at ${vote.voted_at} (delivery ${deliveryId})`,
      );
    },
  });
  app.listen(port, () => console.log(`listening on http://localhost:${port}/webhooks/votes`));
}
