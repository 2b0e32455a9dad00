/**
 * Manual redelivery end to end inside the dispatcher: a delivery that failed its five attempts
 * against a real loopback receiver is redelivered with @botdir/db's redeliver (what vote-ingest and
 * the public API run) and handed to the queue under the same job id; the worker's fresh series
 * reaches the receiver with the same delivery id and the same body bytes.
 */
import { redeliver } from "@botdir/db";
import { seedBot } from "@botdir/db/testing";
import { waitFor } from "@botdir/service-kit/testing";
import { type DispatcherHarness, type Receiver, startDispatcherHarness } from "./support.js";

let h: DispatcherHarness;
let receiver: Receiver;
/** The receiver fails everything until it is told to recover. */
let healthy = false;

beforeAll(async () => {
  h = await startDispatcherHarness();
  receiver = await h.receiver(() => ({ status: healthy ? 204 : 500 }));
});
afterAll(() => h.close());

describe("manual redelivery", () => {
  it("when a failed delivery is redelivered, then a fresh series reaches the receiver with the same id and body bytes", async () => {
    const bot = await seedBot(h.db);
    await h.configureWebhook(bot.id, receiver.url("/redeliver"), "whsec_redelivery");
    const delivery = await h.seedDelivery(bot.id);
    await h.handOff(delivery);
    await h.waitForState(delivery.id, "failed");
    const firstSeries = receiver.forPath("/redeliver");
    expect(firstSeries).toHaveLength(5);
    // The finished job was removed, so the same job id can be added again.
    await waitFor(async () => (await h.queue.getJob(delivery.id)) === undefined, "the job to be removed");

    healthy = true;
    const result = await redeliver(h.db, bot.id, delivery.id, new Date());
    expect(result.kind).toBe("redelivered");
    if (result.kind !== "redelivered") return;
    await h.handOff(result.delivery);
    await h.waitForState(delivery.id, "delivered");

    const all = receiver.forPath("/redeliver");
    expect(all).toHaveLength(6);
    const redelivered = all[5]!;
    expect(redelivered.headers["x-webhook-delivery"]).toBe(delivery.id);
    expect(redelivered.body.equals(firstSeries[0]!.body)).toBe(true);
    expect(redelivered.headers["x-webhook-signature-256"]).toBe(
      firstSeries[0]!.headers["x-webhook-signature-256"],
    );

    // Every attempt is kept: five of series 0, then attempt 1 of series 1.
    const attempts = await h.attempts(delivery.id);
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
    const bot = await seedBot(h.db);
    await h.configureWebhook(bot.id, receiver.url("/pending"), "whsec_pending");
    const delivery = await h.seedDelivery(bot.id, { nextAttemptAt: new Date(Date.now() + 3_600_000) });
    expect(await redeliver(h.db, bot.id, delivery.id, new Date())).toEqual({ kind: "pending" });
    expect(receiver.forPath("/pending")).toHaveLength(0);
  });
});
