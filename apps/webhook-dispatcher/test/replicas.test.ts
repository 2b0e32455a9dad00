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
} from "./support.js";

const N = 24;
let t: TestDatabase;
let queue: ReturnType<typeof openQueue>;
let replicas: StartedWorker[];
let receiver: Receiver;

beforeAll(async () => {
  t = await createTestDatabase({ poolMax: 8 });
  const prefix = testRedisPrefix();
  queue = openQueue(prefix);
  replicas = [
    await startWorker(t.db, testConfig(prefix, { concurrency: 3 })),
    await startWorker(t.db, testConfig(prefix, { concurrency: 3 })),
  ];
  receiver = await startReceiver(() => ({ status: 204, delayMs: 20 }));
});

afterAll(async () => {
  await Promise.all(replicas.map((r) => r.close()));
  await queue.close();
  await receiver.close();
  await t.drop();
});

describe("two dispatcher replicas on one queue", () => {
  it("when N deliveries are queued (some handed off twice), then each is sent exactly once and both replicas work", async () => {
    const bot = await seedBot(t.db);
    await configureWebhook(t.db, bot.id, receiver.url(), "secret");
    const deliveries = [];
    for (let i = 0; i < N; i++) deliveries.push(await seedDelivery(t.db, bot.id));
    const processedBy = new Map<number, number>();
    replicas.forEach((r, i) => {
      r.worker.on("completed", () => processedBy.set(i, (processedBy.get(i) ?? 0) + 1));
    });

    // Like a relay re-hand-off racing the request path: every third delivery is added twice.
    await Promise.all(
      deliveries.flatMap((d, i) =>
        i % 3 === 0 ? [handOff(queue.queue, d), handOff(queue.queue, d)] : [handOff(queue.queue, d)],
      ),
    );
    await waitFor(
      async () => (await t.db.prisma.delivery.count({ where: { botId: bot.id, state: "delivered" } })) === N,
      "all deliveries to be delivered",
    );

    const perDelivery = new Map<string, number>();
    for (const r of receiver.requests) {
      const id = String(r.headers["x-webhook-delivery"]);
      perDelivery.set(id, (perDelivery.get(id) ?? 0) + 1);
    }
    expect(perDelivery.size).toBe(N);
    expect([...perDelivery.values()].every((count) => count === 1)).toBe(true);
    for (const d of deliveries) expect(await attemptRows(t.db, d.id)).toHaveLength(1);
    expect(processedBy.size).toBe(2);
  });
});
