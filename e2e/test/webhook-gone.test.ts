/**
 * A receiver that answers `410 Gone`, with the real processes: the dispatcher makes one attempt,
 * the webhook is disabled at once (as the dead-endpoint rule disables it: reason, state, pending
 * deliveries failed, later votes recorded without a delivery), no further attempt reaches the
 * receiver, and `webhook enable` brings it back.
 */
import { randomUserId } from "@botdir/db/testing";
import { call, waitFor } from "../src/processes.js";
import { useStack } from "../src/stack.js";

/** The receiver answers 410 until the owner has fixed it. */
let status = 410;
const stack = useStack({
  privateRedis: true,
  replicas: { api: 0 },
  reply: (req) => ({ status: req.path === "/sentinel" ? 500 : status }),
});

const listing = async (botId: string) =>
  (
    await call(`${stack.ingest.base}/internal/v1/bots/${botId}`, {
      headers: { authorization: stack.keys.internalKey },
    })
  ).body as { webhook_state: string | null; webhook_disabled_reason: string | null };

describe("a receiver that answers 410 Gone", () => {
  it("when the receiver answers 410, then the webhook is disabled after exactly one attempt, later votes reach it no more, and enabling it works", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/gone"));
    expect((await stack.vote(bot.id, randomUserId())).status).toBe(201);

    const [first] = await waitFor(async () => {
      const rows = await stack.deliveries(bot.id);
      return rows[0]?.state === "failed" ? rows : null;
    }, "the delivery answered 410 to end failed");
    expect(first!.failureReason).toBe("endpoint_disabled");
    expect(await stack.attempts(first!.id)).toEqual([
      expect.objectContaining({ attemptNumber: 1, statusCode: 410 }),
    ]);
    expect(stack.receiver.forPath("/gone")).toHaveLength(1);
    expect(await listing(bot.id)).toMatchObject({
      webhook_state: "disabled",
      webhook_disabled_reason: "gone",
    });

    // A later vote of the disabled webhook gets no delivery at all. The sentinel, a webhook answering
    // 500 cast after it, shows the dispatcher retrying meanwhile (three attempts, 100 ms apart):
    // had the first delivery been left to retry, its attempts would have come in that time too.
    expect((await stack.vote(bot.id, randomUserId())).status).toBe(201);
    const sentinel = await stack.webhookBot(stack.receiver.url("/sentinel"));
    expect((await stack.vote(sentinel.id, randomUserId())).status).toBe(201);
    await waitFor(async () => {
      const [delivery] = await stack.deliveries(sentinel.id);
      return delivery !== undefined && (await stack.attempts(delivery.id)).length >= 3;
    }, "the sentinel delivery's third attempt");
    expect(await stack.deliveries(bot.id)).toHaveLength(1);
    expect(await stack.attempts(first!.id)).toHaveLength(1);
    expect(stack.receiver.forPath("/gone")).toHaveLength(1);

    // The owner fixes the receiver and re-enables the webhook (what `botctl webhook enable` calls).
    status = 204;
    const enabled = await call(`${stack.ingest.base}/internal/v1/bots/${bot.id}/webhook/enable`, {
      method: "POST",
      headers: { authorization: stack.keys.internalKey },
    });
    expect(enabled.status).toBe(200);
    expect(await listing(bot.id)).toMatchObject({ webhook_state: "active", webhook_disabled_reason: null });
    expect((await stack.vote(bot.id, randomUserId())).status).toBe(201);
    await waitFor(async () => {
      const rows = await stack.deliveries(bot.id);
      return rows.length === 2 && rows[1]?.state === "delivered";
    }, "the vote after re-enabling to be delivered");
    expect(stack.receiver.forPath("/gone")).toHaveLength(2);
  });
});
