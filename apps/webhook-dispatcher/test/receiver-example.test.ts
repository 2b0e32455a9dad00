/** The documented Express receiver (examples/receiver.ts) against real deliveries. */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { createTestDatabase, seedBot, type TestDatabase, testRedisPrefix } from "@botdir/db/testing";
import type { VoteEvent } from "@botdir/sdk";
import { waitFor } from "@botdir/service-kit/testing";
import request from "supertest";
import { createReceiver } from "../examples/receiver.js";
import {
  attemptRows,
  configureWebhook,
  handOff,
  openQueue,
  type StartedWorker,
  seedDelivery,
  startWorker,
  testConfig,
  waitForState,
} from "./support.js";

const SECRET = "whsec_example_receiver";
let t: TestDatabase;
let queue: ReturnType<typeof openQueue>;
let worker: StartedWorker;
let server: Server;
const votes: { vote: VoteEvent; deliveryId: string }[] = [];
const app = createReceiver({
  secret: SECRET,
  onVote: (vote, { deliveryId }) => void votes.push({ vote, deliveryId }),
});

beforeAll(async () => {
  t = await createTestDatabase();
  const prefix = testRedisPrefix();
  queue = openQueue(prefix);
  worker = await startWorker(t.db, testConfig(prefix));
  server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
});

afterAll(async () => {
  await worker.close();
  await queue.close();
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await t.drop();
});

describe("the example receiver", () => {
  it("when the dispatcher delivers a vote, then the receiver verifies it, answers 204 and handles it once", async () => {
    const { port } = server.address() as AddressInfo;
    const bot = await seedBot(t.db);
    await configureWebhook(t.db, bot.id, `http://127.0.0.1:${port}/webhooks/votes`, SECRET);
    const delivery = await seedDelivery(t.db, bot.id);

    await handOff(queue.queue, delivery);
    await waitForState(t.db, delivery.id, "delivered");
    await waitFor(async () => votes.length === 1, "the vote handler to run");

    expect((await attemptRows(t.db, delivery.id)).map((a) => a.statusCode)).toEqual([204]);
    expect(votes[0]).toEqual({
      deliveryId: delivery.id,
      vote: {
        event: "vote.create",
        bot_id: bot.id,
        user_id: delivery.userId,
        voted_at: delivery.votedAt.toISOString(),
      },
    });
  });

  it("when the same delivery arrives again, then it answers 204 and does not handle it twice", async () => {
    const { sign } = await import("@botdir/signing");
    const body = JSON.stringify({
      event: "vote.create",
      bot_id: "123456789012345678",
      user_id: "223456789012345678",
      voted_at: "2026-11-21T12:00:00.000Z",
    });
    const send = () =>
      request(app)
        .post("/webhooks/votes")
        .set("Content-Type", "application/json")
        .set("X-Webhook-Event", "vote.create")
        .set("X-Webhook-Delivery", "6f1c2d1e-3b7a-4c47-9a53-0d9cfb3c2a11")
        .set("X-Webhook-Signature-256", sign(SECRET, body))
        .set("Authorization", SECRET)
        .send(body);
    const before = votes.length;

    expect((await send()).status).toBe(204);
    expect((await send()).status).toBe(204);
    await waitFor(async () => votes.length === before + 1, "the first copy to be handled");
    await new Promise((r) => setImmediate(r));
    expect(votes.length).toBe(before + 1);
  });

  it("when the body was altered or re-serialised, then the signature check rejects it with 401", async () => {
    const { sign } = await import("@botdir/signing");
    const original = '{"event":"vote.create","bot_id":"123456789012345678","user_id":"1","voted_at":"x"}';
    const reformatted = JSON.stringify(JSON.parse(original), null, 2);

    const res = await request(app)
      .post("/webhooks/votes")
      .set("Content-Type", "application/json")
      .set("X-Webhook-Event", "vote.create")
      .set("X-Webhook-Delivery", "d")
      .set("X-Webhook-Signature-256", sign(SECRET, original))
      .set("Authorization", SECRET)
      .send(reformatted);

    expect(res.status).toBe(401);
  });
});
