import { createHmac, randomUUID } from "node:crypto";
import { seedBot } from "@botdir/db/testing";
import { QUEUES, WEBHOOK_USER_AGENT } from "@botdir/schema";
import { waitFor } from "@botdir/service-kit/testing";
import { QueueEvents } from "bullmq";
import { EARLY_SLACK_MS } from "../src/deliver.handler.js";
import { type DispatcherHarness, startDispatcherHarness, workerRedis } from "./support.js";

let h: DispatcherHarness;
beforeAll(async () => {
  h = await startDispatcherHarness();
});
afterAll(() => h.close());

describe("webhook delivery", () => {
  it("when a vote is delivered, then the request has the spec's headers and a signature that an independent HMAC over the received bytes confirms", async () => {
    const r = await h.receiver(() => ({ status: 204 }));
    const { bot, delivery, secret } = await h.arrange(r.url());

    await h.handOff(delivery);
    const row = await h.waitForState(delivery.id, "delivered");

    expect(r.requests).toHaveLength(1);
    const req = r.requests[0]!;
    expect(req.method).toBe("POST");
    expect(req.headers["content-type"]).toBe("application/json");
    expect(req.headers["user-agent"]).toBe(WEBHOOK_USER_AGENT);
    expect(req.headers["user-agent"]).toMatch(/\/1$/);
    expect(req.headers.authorization).toBe(secret);
    expect(req.headers["x-webhook-event"]).toBe("vote.create");
    expect(req.headers["x-webhook-delivery"]).toBe(delivery.id);
    const expected = `sha256=${createHmac("sha256", secret).update(req.body).digest("hex")}`;
    expect(req.headers["x-webhook-signature-256"]).toBe(expected);
    expect(req.body.toString("utf8")).toBe(
      JSON.stringify({
        event: "vote.create",
        bot_id: bot.id,
        user_id: delivery.userId,
        voted_at: delivery.votedAt.toISOString(),
      }),
    );
    expect(JSON.parse(req.body.toString("utf8")).voted_at).toMatch(
      /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/,
    );

    expect(row.attemptsMade).toBe(1);
    expect(row.completedAt).not.toBeNull();
    expect(row.leaseUntil).toBeNull();
    const attempts = await h.attempts(delivery.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind, a.botId])).toEqual([
      [1, 204, null, bot.id],
    ]);
    await h.jobGone(delivery.id);
  });

  it("when a vote.available delivery is sent, then it carries its own delivery id, the event header and available_at = voted_at + 12 h, signed like a vote", async () => {
    const r = await h.receiver(() => ({ status: 204 }));
    const { bot, delivery, secret } = await h.arrange(r.url());
    const vote = await h.db.prisma.delivery.findUniqueOrThrow({ where: { id: delivery.id } });
    const reminderId = randomUUID();
    await h.db.prisma.delivery.create({
      data: {
        id: reminderId,
        botId: bot.id,
        voteId: vote.voteId,
        event: "vote.available",
        nextAttemptAt: new Date(),
      },
    });

    await h.handOff({ ...delivery, id: reminderId });
    await h.waitForState(reminderId, "delivered");

    expect(r.requests).toHaveLength(1);
    const req = r.requests[0]!;
    expect(req.headers["x-webhook-event"]).toBe("vote.available");
    expect(req.headers["x-webhook-delivery"]).toBe(reminderId);
    expect(req.headers["webhook-id"]).toBe(reminderId);
    expect(req.headers.authorization).toBe(secret);
    const expected = `sha256=${createHmac("sha256", secret).update(req.body).digest("hex")}`;
    expect(req.headers["x-webhook-signature-256"]).toBe(expected);
    expect(req.body.toString("utf8")).toBe(
      JSON.stringify({
        event: "vote.available",
        bot_id: bot.id,
        user_id: delivery.userId,
        voted_at: delivery.votedAt.toISOString(),
        available_at: new Date(delivery.votedAt.getTime() + 12 * 3_600_000).toISOString(),
      }),
    );
    const attempts = await h.attempts(reminderId);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([[1, 204, null]]);
    // The vote's own vote.create delivery is untouched.
    expect((await h.row(delivery.id)).state).toBe("pending");
  });

  it("when the receiver fails twice, then the retries carry the same delivery id and bytes and stop at the first 2xx", async () => {
    const r = await h.receiver((_req, n) => ({ status: n <= 2 ? 500 : 200 }));
    const { delivery } = await h.arrange(r.url());

    await h.handOff(delivery);
    await h.waitForState(delivery.id, "delivered");
    await h.jobGone(delivery.id);

    expect(r.requests).toHaveLength(3);
    expect(new Set(r.requests.map((q) => q.headers["x-webhook-delivery"]))).toEqual(new Set([delivery.id]));
    expect(new Set(r.requests.map((q) => q.body.toString("hex"))).size).toBe(1);
    expect(new Set(r.requests.map((q) => q.headers["x-webhook-signature-256"])).size).toBe(1);
    const attempts = await h.attempts(delivery.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([
      [1, 500, "http_status"],
      [2, 500, "http_status"],
      [3, 200, null],
    ]);
    expect((await h.row(delivery.id)).attemptsMade).toBe(3);
  });

  it("when the receiver answers 302, then the attempt fails as a redirect and the Location is never requested", async () => {
    const r = await h.receiver((req, n) =>
      req.path === "/hook" && n === 1 ? { status: 302, location: "/elsewhere" } : { status: 204 },
    );
    const { delivery } = await h.arrange(r.url("/hook"));

    await h.handOff(delivery);
    await h.waitForState(delivery.id, "delivered");

    expect(r.forPath("/elsewhere")).toHaveLength(0);
    expect(r.forPath("/hook")).toHaveLength(2);
    const attempts = await h.attempts(delivery.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([
      [1, 302, "redirect"],
      [2, 204, null],
    ]);
  });

  it("when the receiver does not answer within the timeout, then the attempt is recorded as a timeout and retried", async () => {
    const r = await h.receiver((_req, n) => (n === 1 ? "hang" : { status: 204 }));
    const { delivery } = await h.arrange(r.url());

    await h.handOff(delivery);
    await h.waitForState(delivery.id, "delivered");

    const attempts = await h.attempts(delivery.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([
      [1, null, "timeout"],
      [2, 204, null],
    ]);
    expect(attempts[0]!.durationMs).toBeGreaterThanOrEqual(290); // the 300 ms timeout, not a quick error
  });

  it("when every attempt fails, then there are exactly five, the delivery is failed, and a later hand-off makes no sixth", async () => {
    const r = await h.receiver(() => ({ status: 503 }));
    const { delivery } = await h.arrange(r.url());

    await h.handOff(delivery);
    const row = await h.waitForState(delivery.id, "failed");
    await h.jobGone(delivery.id);

    expect(row.attemptsMade).toBe(5);
    expect(row.completedAt).not.toBeNull();
    expect(r.requests).toHaveLength(5);
    const attempts = await h.attempts(delivery.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual(
      [1, 2, 3, 4, 5].map((n) => [n, 503, "http_status"]),
    );

    // The outbox relay hands the delivery off again (e.g. it saw a stale row): nothing happens.
    await h.handOff({ id: delivery.id, attemptsMade: 5, nextAttemptAt: new Date() });
    await h.jobGone(delivery.id);
    expect(r.requests).toHaveLength(5);
    expect(await h.attempts(delivery.id)).toHaveLength(5);
  });

  it("when a job fires before next_attempt_at, then it is delayed and nothing is sent before that time", async () => {
    const r = await h.receiver(() => ({ status: 204 }));
    const bot = await seedBot(h.db);
    await h.configureWebhook(bot.id, r.url(), "s");
    // Far enough ahead that the first run is early however slow the machine; the delayed path is
    // then proven by BullMQ's own "delayed" event for this job, not assumed.
    const nextAttemptAt = new Date(Date.now() + 3_000);
    const delivery = await h.seedDelivery(bot.id, { nextAttemptAt });
    const events = new QueueEvents(QUEUES.webhookDeliveries, { connection: workerRedis(), prefix: h.prefix });
    try {
      await events.waitUntilReady();
      let delayedTo: number | null = null;
      events.on("delayed", ({ jobId, delay }) => {
        if (jobId === delivery.id) delayedTo = Number(delay);
      });

      // Hand off as if the clock said the attempt is due now (delay 0).
      await h.handOff(delivery, nextAttemptAt);
      const delayedUntil = await waitFor(async () => delayedTo, `job ${delivery.id} to be delayed`);
      expect(r.requests).toHaveLength(0);
      expect(delayedUntil).toBe(nextAttemptAt.getTime());
      await h.waitForState(delivery.id, "delivered");
    } finally {
      await events.close();
    }

    expect(r.requests).toHaveLength(1);
    expect(r.requests[0]!.at).toBeGreaterThanOrEqual(nextAttemptAt.getTime() - EARLY_SLACK_MS);
    expect(await h.attempts(delivery.id)).toHaveLength(1);
  });

  it("when the bot's webhook was removed before the attempt, then the delivery is failed without a request or an attempt", async () => {
    const r = await h.receiver(() => ({ status: 204 }));
    const { bot, delivery } = await h.arrange(r.url());
    await h.configureWebhook(bot.id, null, null);

    await h.handOff(delivery);
    const row = await h.waitForState(delivery.id, "failed");

    expect(row.attemptsMade).toBe(0);
    expect(r.requests).toHaveLength(0);
    expect(await h.attempts(delivery.id)).toHaveLength(0);
  });

  it("when the same delivery is handed off twice while queued, then it is sent once", async () => {
    const r = await h.receiver(() => ({ status: 204, delayMs: 50 }));
    const { delivery } = await h.arrange(r.url());

    await Promise.all([h.handOff(delivery), h.handOff(delivery)]);
    await h.waitForState(delivery.id, "delivered");
    await h.jobGone(delivery.id);
    await h.handOff(delivery); // a late re-hand-off after delivery
    await h.jobGone(delivery.id);

    expect(r.requests).toHaveLength(1);
    expect(await h.attempts(delivery.id)).toHaveLength(1);
  });
});
