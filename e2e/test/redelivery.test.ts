/**
 * Manual redelivery across the real processes: a vote's delivery fails its five attempts against a
 * loopback receiver; the owner lists the attempts and redelivers it with the bot token on the
 * public API; vote-ingest's outbox relay hands the fresh series to the dispatcher, which reaches
 * the (now healthy) receiver with the same delivery id and the same body bytes. A delivery whose
 * attempt is in flight gets 409 from both the owner's and the operator's endpoint.
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
import { appEnv, castVote, deliveriesOf, seedWebhookBot } from "../src/stack.js";

const keys = freshKeys();
let t: TestDatabase;
let redis: PrivateRedis;
let api: AppProcess;
let ingest: AppProcess;
let receiver: Receiver;
/** The receiver answers 500 until a test makes it healthy. */
let healthy = false;

beforeAll(async () => {
  [t, redis, receiver] = await Promise.all([
    createTestDatabase(),
    startRedisServer(),
    startReceiver((req) => (req.path === "/hang" ? "hang" : { status: healthy ? 204 : 500 })),
  ]);
  const env = appEnv({ databaseUrl: t.url, redisUrl: redis.url, keys });
  [api, ingest] = await Promise.all([
    startApp("api", env),
    startApp("vote-ingest", env),
    startApp("webhook-dispatcher", env),
  ]);
}, 60_000);

afterAll(async () => {
  await stopAll();
  await redis?.kill();
  await receiver?.close();
  await t?.drop();
});

async function stateOf(botId: string) {
  const [delivery] = await deliveriesOf(t.db, botId);
  return delivery;
}

describe("redelivery with real processes", () => {
  it("when the owner redelivers a failed delivery, then the receiver gets the same id and bytes, and the log shows both series", async () => {
    const bot = await seedWebhookBot(t.db, keys, receiver.url("/owner"));
    expect((await castVote(ingest.base, keys.internalKey, bot.id, randomUserId())).status).toBe(201);
    const failed = await waitFor(
      async () => ((await stateOf(bot.id))?.state === "failed" ? stateOf(bot.id) : null),
      "the delivery to fail",
      30_000,
    );
    const deliveryId = failed!.id;
    const firstSeries = receiver.forPath("/owner");
    expect(firstSeries).toHaveLength(5);

    const auth = { authorization: bot.token };
    const listed = await call(`${api.base}/api/v1/bots/${bot.id}/webhook/deliveries`, { headers: auth });
    expect(listed.status).toBe(200);
    const attempts = (listed.body as { attempts: { outcome: string; deliveryState: string }[] }).attempts;
    expect(attempts).toHaveLength(5);
    expect(attempts.every((a) => a.outcome === "failed" && a.deliveryState === "failed")).toBe(true);

    healthy = true;
    const url = `${api.base}/api/v1/bots/${bot.id}/webhook/deliveries/${deliveryId}/redeliver`;
    const redelivered = await call(url, { method: "POST", headers: auth });
    expect(redelivered.status).toBe(202);
    expect(redelivered.body).toEqual({ deliveryId, state: "pending", series: 1 });

    await waitFor(async () => (await stateOf(bot.id))?.state === "delivered", "the redelivery", 30_000);
    const all = receiver.forPath("/owner");
    expect(all).toHaveLength(6);
    expect(all[5]?.headers["x-webhook-delivery"]).toBe(deliveryId);
    expect(all[5]?.body.equals(firstSeries[0]!.body)).toBe(true);

    const after = await call(`${api.base}/api/v1/bots/${bot.id}/webhook/deliveries`, { headers: auth });
    const newest = (after.body as { attempts: Record<string, unknown>[] }).attempts[0];
    expect(newest).toMatchObject({
      deliveryId,
      series: 1,
      attempt: 1,
      statusCode: 204,
      outcome: "delivered",
    });
  }, 90_000);

  it("when an attempt is in flight (the delivery is pending), then both the owner and the operator get 409", async () => {
    const bot = await seedWebhookBot(t.db, keys, receiver.url("/hang"));
    expect((await castVote(ingest.base, keys.internalKey, bot.id, randomUserId())).status).toBe(201);
    // The receiver holds the request: the attempt is in flight until the 2 s timeout.
    await waitFor(async () => receiver.forPath("/hang").length > 0, "the first attempt", 10_000);
    const delivery = await stateOf(bot.id);
    expect(delivery?.state).toBe("pending");
    const path = `/bots/${bot.id}/webhook/deliveries/${delivery?.id}/redeliver`;
    const owner = await call(`${api.base}/api/v1${path}`, {
      method: "POST",
      headers: { authorization: bot.token },
    });
    const operator = await call(`${ingest.base}/internal/v1${path}`, {
      method: "POST",
      headers: { authorization: keys.internalKey },
    });
    expect(owner.status).toBe(409);
    expect(operator.status).toBe(409);
    expect((await stateOf(bot.id))?.series).toBe(0);
  }, 30_000);
});
