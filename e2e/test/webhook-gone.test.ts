/**
 * A receiver that answers `410 Gone`, with the real processes: the dispatcher makes one attempt,
 * the webhook is disabled at once (as the dead-endpoint rule disables it: reason, state, pending
 * deliveries failed, later votes recorded without a delivery), no further attempt reaches the
 * receiver, and `webhook enable` brings it back.
 */
import {
  createTestDatabase,
  type PrivateRedis,
  randomUserId,
  startRedisServer,
  type TestDatabase,
} from "@botdir/db/testing";
import { type AppProcess, call, freshKeys, startApp, stopAll, waitFor } from "../src/processes.js";
import { type Receiver, startReceiver } from "../src/receivers.js";
import { appEnv, attemptsOf, castVote, deliveriesOf, seedWebhookBot } from "../src/stack.js";

const keys = freshKeys();
let t: TestDatabase;
let redis: PrivateRedis;
let ingest: AppProcess;
let receiver: Receiver;
/** The receiver answers 410 until the owner has fixed it. */
let status = 410;

beforeAll(async () => {
  [t, redis, receiver] = await Promise.all([
    createTestDatabase(),
    startRedisServer(),
    startReceiver((req) => ({ status: req.path === "/sentinel" ? 500 : status })),
  ]);
  const env = appEnv({ databaseUrl: t.url, redisUrl: redis.url, keys });
  [ingest] = await Promise.all([startApp("vote-ingest", env), startApp("webhook-dispatcher", env)]);
}, 60_000);

afterAll(async () => {
  await stopAll();
  await redis?.kill();
  await receiver?.close();
  await t?.drop();
});

const listing = async (botId: string) =>
  (await call(`${ingest.base}/internal/v1/bots/${botId}`, { headers: { authorization: keys.internalKey } }))
    .body as { webhook_state: string | null; webhook_disabled_reason: string | null };

describe("a receiver that answers 410 Gone", () => {
  it("when the receiver answers 410, then the webhook is disabled after exactly one attempt, later votes reach it no more, and enabling it works", async () => {
    const bot = await seedWebhookBot(t.db, keys, receiver.url("/gone"));
    expect((await castVote(ingest.base, keys.internalKey, bot.id, randomUserId())).status).toBe(201);

    const [first] = await waitFor(async () => {
      const rows = await deliveriesOf(t.db, bot.id);
      return rows[0]?.state === "failed" ? rows : null;
    }, "the delivery answered 410 to end failed");
    expect(first!.failureReason).toBe("endpoint_disabled");
    expect(await attemptsOf(t.db, first!.id)).toEqual([
      expect.objectContaining({ attemptNumber: 1, statusCode: 410 }),
    ]);
    expect(receiver.forPath("/gone")).toHaveLength(1);
    expect(await listing(bot.id)).toMatchObject({
      webhook_state: "disabled",
      webhook_disabled_reason: "gone",
    });

    // A later vote of the disabled webhook gets no delivery at all. The sentinel, a webhook answering
    // 500 cast after it, shows the dispatcher retrying meanwhile (three attempts, 100 ms apart):
    // had the first delivery been left to retry, its attempts would have come in that time too.
    expect((await castVote(ingest.base, keys.internalKey, bot.id, randomUserId())).status).toBe(201);
    const sentinel = await seedWebhookBot(t.db, keys, receiver.url("/sentinel"));
    expect((await castVote(ingest.base, keys.internalKey, sentinel.id, randomUserId())).status).toBe(201);
    await waitFor(async () => {
      const [delivery] = await deliveriesOf(t.db, sentinel.id);
      return delivery !== undefined && (await attemptsOf(t.db, delivery.id)).length >= 3;
    }, "the sentinel delivery's third attempt");
    expect(await deliveriesOf(t.db, bot.id)).toHaveLength(1);
    expect(await attemptsOf(t.db, first!.id)).toHaveLength(1);
    expect(receiver.forPath("/gone")).toHaveLength(1);

    // The owner fixes the receiver and re-enables the webhook (what `botctl webhook enable` calls).
    status = 204;
    const enabled = await call(`${ingest.base}/internal/v1/bots/${bot.id}/webhook/enable`, {
      method: "POST",
      headers: { authorization: keys.internalKey },
    });
    expect(enabled.status).toBe(200);
    expect(await listing(bot.id)).toMatchObject({ webhook_state: "active", webhook_disabled_reason: null });
    expect((await castVote(ingest.base, keys.internalKey, bot.id, randomUserId())).status).toBe(201);
    await waitFor(async () => {
      const rows = await deliveriesOf(t.db, bot.id);
      return rows.length === 2 && rows[1]?.state === "delivered";
    }, "the vote after re-enabling to be delivered");
    expect(receiver.forPath("/gone")).toHaveLength(2);
  });
});
