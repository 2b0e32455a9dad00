/**
 * Manual redelivery end to end inside the dispatcher: a delivery that failed its five attempts
 * against a real loopback receiver is redelivered with @botdir/db's redeliver (what vote-ingest and
 * the public API run) and handed to the queue under the same job id; the worker's fresh series
 * reaches the receiver with the same delivery id and the same body bytes.
 */
import { redeliver } from "@botdir/db";
import { createTestDatabase, seedBot, type TestDatabase, testRedisPrefix } from "@botdir/db/testing";
import {
  attemptRows,
  configureWebhook,
  handOff,
  openQueue,
  type Receiver,
  type StartedWorker,
  seedDelivery,
  startReceiver,
  startWorker,
  testConfig,
  waitFor,
  waitForState,
} from "./support.js";

let t: TestDatabase;
let queue: ReturnType<typeof openQueue>;
let worker: StartedWorker;
let receiver: Receiver;
/** The receiver fails everything until it is told to recover. */
let healthy = false;

beforeAll(async () => {
  t = await createTestDatabase();
  const prefix = testRedisPrefix();
  queue = openQueue(prefix);
  worker = await startWorker(t.db, testConfig(prefix));
  receiver = await startReceiver(() => ({ status: healthy ? 204 : 500 }));
});

afterAll(async () => {
  await worker.close();
  await queue.close();
  await receiver.close();
  await t.drop();
});

describe("manual redelivery", () => {
  it("when a failed delivery is redelivered, then a fresh series reaches the receiver with the same id and body bytes", async () => {
    const bot = await seedBot(t.db);
    await configureWebhook(t.db, bot.id, receiver.url("/redeliver"), "whsec_redelivery");
    const delivery = await seedDelivery(t.db, bot.id);
    await handOff(queue.queue, delivery);
    await waitForState(t.db, delivery.id, "failed");
    const firstSeries = receiver.forPath("/redeliver");
    expect(firstSeries).toHaveLength(5);
    // The finished job was removed, so the same job id can be added again.
    await waitFor(async () => (await queue.queue.getJob(delivery.id)) === undefined, "the job to be removed");

    healthy = true;
    const result = await redeliver(t.db, bot.id, delivery.id, new Date());
    expect(result.kind).toBe("redelivered");
    if (result.kind !== "redelivered") return;
    await handOff(queue.queue, result.delivery);
    await waitForState(t.db, delivery.id, "delivered");

    const all = receiver.forPath("/redeliver");
    expect(all).toHaveLength(6);
    const redelivered = all[5]!;
    expect(redelivered.headers["x-webhook-delivery"]).toBe(delivery.id);
    expect(redelivered.body.equals(firstSeries[0]!.body)).toBe(true);
    expect(redelivered.headers["x-webhook-signature-256"]).toBe(
      firstSeries[0]!.headers["x-webhook-signature-256"],
    );

    // Every attempt is kept: five of series 0, then attempt 1 of series 1.
    const attempts = await attemptRows(t.db, delivery.id);
    expect(attempts.map((a) => [a.series, a.attemptNumber, a.statusCode])).toEqual(
      expect.arrayContaining([
        [0, 1, 500],
        [0, 5, 500],
        [1, 1, 204],
      ]),
    );
    expect(attempts).toHaveLength(6);
  });

  it("when the delivery is pending, then redeliver refuses and the running series is untouched", async () => {
    const bot = await seedBot(t.db);
    await configureWebhook(t.db, bot.id, receiver.url("/pending"), "whsec_pending");
    const delivery = await seedDelivery(t.db, bot.id, { nextAttemptAt: new Date(Date.now() + 3_600_000) });
    expect(await redeliver(t.db, bot.id, delivery.id, new Date())).toEqual({ kind: "pending" });
    expect(receiver.forPath("/pending")).toHaveLength(0);
  });
});
