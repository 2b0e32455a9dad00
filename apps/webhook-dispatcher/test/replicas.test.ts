import { seedBot } from "@botdir/db/testing";
import { waitFor } from "@botdir/service-kit/testing";
import { type DispatcherHarness, type Receiver, startDispatcherHarness } from "./support.js";

const N = 24;
let h: DispatcherHarness;
let receiver: Receiver;

beforeAll(async () => {
  // A 10 s attempt timeout: with testConfig's 300 ms a loaded machine times a 20 ms answer out and
  // the retry is a second request for the same delivery.
  const replica = { concurrency: 3, lockDurationMs: 30_000, timeoutMs: 10_000 };
  h = await startDispatcherHarness({ poolMax: 8, workers: [replica, replica] });
  receiver = await h.receiver(() => ({ status: 204, delayMs: 20 }));
});
afterAll(() => h.close());

describe("two dispatcher replicas on one queue", () => {
  it("when N deliveries are queued (some handed off twice), then each is sent exactly once and both replicas work", async () => {
    const bot = await seedBot(h.db);
    await h.configureWebhook(bot.id, receiver.url(), "secret");
    const deliveries = [];
    for (let i = 0; i < N; i++) deliveries.push(await h.seedDelivery(bot.id));
    const processedBy = new Map<number, number>();
    h.workers.forEach((r, i) => {
      r.worker.on("completed", () => processedBy.set(i, (processedBy.get(i) ?? 0) + 1));
    });

    // Like a relay re-hand-off racing the request path: every third delivery is added twice.
    await Promise.all(
      deliveries.flatMap((d, i) => (i % 3 === 0 ? [h.handOff(d), h.handOff(d)] : [h.handOff(d)])),
    );
    await waitFor(
      async () => (await h.db.prisma.delivery.count({ where: { botId: bot.id, state: "delivered" } })) === N,
      "all deliveries to be delivered",
    );

    const perDelivery = new Map<string, number>();
    for (const r of receiver.requests) {
      const id = String(r.headers["x-webhook-delivery"]);
      perDelivery.set(id, (perDelivery.get(id) ?? 0) + 1);
    }
    expect(perDelivery.size).toBe(N);
    expect([...perDelivery.values()].every((count) => count === 1)).toBe(true);
    for (const d of deliveries) expect(await h.attempts(d.id)).toHaveLength(1);
    expect(processedBy.size).toBe(2);
  });
});
