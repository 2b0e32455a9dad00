/**
 * Manual redelivery through the internal endpoint and botctl: which deliveries may be redelivered,
 * what the row looks like afterwards, and that the series is handed to the queue (a finished job
 * with the same id was removed, so the add creates a new one) or left to the outbox relay.
 */
import { randomUUID } from "node:crypto";
import { seedBot, testRedisPrefix, testRedisUrl } from "@botdir/db/testing";
import { ManualClock } from "@botdir/service-kit";
import { silentLogger } from "@botdir/service-kit/testing";
import { Queue } from "bullmq";
import type { Express } from "express";
import request from "supertest";
import { runBotctl } from "../src/cli/botctl.js";
import { createOutboxRelay } from "../src/outbox/relay.js";
import { seedDeliveries } from "./support/attempts.js";
import { INTERNAL_KEY, useIngestFixture } from "./support/votes.js";

const t = useIngestFixture();
let app: Express;
const clock = new ManualClock(new Date("2026-11-22T10:00:00.000Z"));

beforeAll(() => {
  app = t.app({ clock });
});

/** A bot with a webhook and one delivery in `state`, with one recorded attempt. */
async function seedOne(state: "pending" | "delivered" | "failed", options: { webhook?: boolean } = {}) {
  const bot = await seedBot(t.db);
  if (options.webhook !== false) {
    await t.db.pool.query("UPDATE bots SET webhook_url = $2, webhook_secret_encrypted = 'x' WHERE id = $1", [
      bot.id,
      "https://hooks.example.com/vote",
    ]);
  }
  const [attempt] = await seedDeliveries(t.db, bot.id, new Date("2026-11-22T09:00:00.000Z"), [
    { state, attempts: [{ statusCode: 500, errorKind: "http_status", at: 0 }] },
  ]);
  if (!attempt) throw new Error("seed failed");
  // Created when its vote was cast, an hour before the clock's now.
  await t.db.pool.query("UPDATE webhook_deliveries SET created_at = $2 WHERE id = $1", [
    attempt.deliveryId,
    new Date("2026-11-22T09:00:00.000Z"),
  ]);
  return { botId: bot.id, deliveryId: attempt.deliveryId };
}

const redeliverUrl = (botId: string, deliveryId: string) =>
  `/internal/v1/bots/${botId}/webhook/deliveries/${deliveryId}/redeliver`;

async function row(id: string) {
  const { rows } = await t.db.pool.query<{
    state: string;
    attempts_made: number;
    series: number;
    next_attempt_at: Date;
    completed_at: Date | null;
    handed_off_at: Date | null;
  }>(
    "SELECT state, attempts_made, series, next_attempt_at, completed_at, handed_off_at FROM webhook_deliveries WHERE id = $1",
    [id],
  );
  return rows[0];
}

describe("POST /internal/v1/bots/:id/webhook/deliveries/:deliveryId/redeliver", () => {
  it.each(["failed", "delivered"] as const)(
    "when the delivery is %s, then 202, a fresh series is due now and its job is on the queue",
    async (state) => {
      const { botId, deliveryId } = await seedOne(state);
      // A finished job of the same id is gone (removeOnComplete); a stale one must not block the add.
      const res = await request(app).post(redeliverUrl(botId, deliveryId)).set("Authorization", INTERNAL_KEY);

      expect(res.status).toBe(202);
      expect(res.body).toEqual({ deliveryId, state: "pending", series: 1 });
      expect(await row(deliveryId)).toMatchObject({
        state: "pending",
        attempts_made: 0,
        series: 1,
        next_attempt_at: clock.now(),
        completed_at: null,
      });
      const job = await t.queue.queue.getJob(deliveryId);
      expect(job?.data).toEqual({ deliveryId, botId }); // the bot rides along for the dispatcher's fairness caps
      expect(job?.opts.attempts).toBe(5);
      await t.queue.flush();
      expect((await row(deliveryId))?.handed_off_at).toEqual(clock.now());
    },
  );

  it("when the delivery is still pending, then 409 and nothing changes", async () => {
    const { botId, deliveryId } = await seedOne("pending");
    const before = await row(deliveryId);
    const res = await request(app).post(redeliverUrl(botId, deliveryId)).set("Authorization", INTERNAL_KEY);
    expect(res.status).toBe(409);
    expect(res.headers["x-botdir-conflict"]).toBe("delivery_pending");
    expect(res.body).toEqual({
      error: "The delivery is still pending; redeliver it once it is delivered or failed.",
    });
    expect(await row(deliveryId)).toEqual(before);
  });

  it("when a redelivery is asked for twice at once, then one series starts and the other gets 409", async () => {
    const { botId, deliveryId } = await seedOne("failed");
    const answers = await Promise.all(
      [1, 2].map(() => request(app).post(redeliverUrl(botId, deliveryId)).set("Authorization", INTERNAL_KEY)),
    );
    expect(answers.map((a) => a.status).sort()).toEqual([202, 409]);
    expect((await row(deliveryId))?.series).toBe(1);
  });

  it("when the delivery belongs to another bot, is unknown or is not a UUID, then the same 404", async () => {
    const mine = await seedOne("failed");
    const theirs = await seedOne("failed");
    for (const deliveryId of [theirs.deliveryId, randomUUID(), "not-a-uuid", "1"]) {
      const res = await request(app)
        .post(redeliverUrl(mine.botId, deliveryId))
        .set("Authorization", INTERNAL_KEY);
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ error: "Delivery not found." });
    }
    expect((await row(theirs.deliveryId))?.state).toBe("failed");
  });

  it("when the bot has no webhook URL any more, then 409 saying so", async () => {
    const { botId, deliveryId } = await seedOne("failed", { webhook: false });
    const res = await request(app).post(redeliverUrl(botId, deliveryId)).set("Authorization", INTERNAL_KEY);
    expect(res.status).toBe(409);
    expect(res.headers["x-botdir-conflict"]).toBe("no_webhook");
    expect(res.body.error).toMatch(/no webhook URL/);
    expect((await row(deliveryId))?.state).toBe("failed");
  });

  it("when the bot id is malformed, then 400; when the key is missing, then 401", async () => {
    const bad = await request(app).post(redeliverUrl("12", randomUUID())).set("Authorization", INTERNAL_KEY);
    expect(bad.status).toBe(400);
    const { botId, deliveryId } = await seedOne("failed");
    const unauthenticated = await request(app).post(redeliverUrl(botId, deliveryId));
    expect(unauthenticated.status).toBe(401);
    expect((await row(deliveryId))?.state).toBe("failed");
  });

  it("when the queue is unavailable, then 202 anyway and the outbox relay hands the series off", async () => {
    const noQueue = t.app({ clock, deliveryQueue: undefined });
    const { botId, deliveryId } = await seedOne("failed");
    const res = await request(noQueue)
      .post(redeliverUrl(botId, deliveryId))
      .set("Authorization", INTERNAL_KEY);
    expect(res.status).toBe(202);
    expect((await row(deliveryId))?.handed_off_at).toBeNull();

    const relay = createOutboxRelay({ db: t.db, queue: t.queue, clock, logger: silentLogger });
    expect(await relay.tick()).toBeGreaterThanOrEqual(1);
    expect((await t.queue.queue.getJob(deliveryId))?.data).toEqual({ deliveryId, botId });
  });
});

describe("botctl webhook redeliver", () => {
  it("when the delivery failed, then prints the new series' state and the job is queued in a trace of its own", async () => {
    const { botId, deliveryId } = await seedOne("failed");
    // The vote's trace, which the first series ran in.
    const original = `00-${"ab".repeat(16)}-${"cd".repeat(8)}-01`;
    await t.db.pool.query("UPDATE webhook_deliveries SET traceparent = $2 WHERE id = $1", [
      deliveryId,
      original,
    ]);
    const prefix = `${testRedisPrefix()}cli`;
    const result = await runBotctl(["webhook", "redeliver", botId, deliveryId], {
      DATABASE_URL: t.url,
      REDIS_URL: testRedisUrl(),
      QUEUE_PREFIX: prefix,
    });
    expect(result).toEqual({ code: 0, output: { deliveryId, state: "pending", series: 1 } });
    const { rows } = await t.db.pool.query<{ traceparent: string | null }>(
      "SELECT traceparent FROM webhook_deliveries WHERE id = $1",
      [deliveryId],
    );
    const traceparent = /^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$/;
    // The row keeps the redelivery's own context: a new, valid trace, not the vote's.
    const stored = traceparent.exec(rows[0]?.traceparent ?? "");
    expect(stored?.[1]).toBeDefined();
    expect(stored?.[1]).not.toBe("ab".repeat(16));
    expect(stored?.[1]).not.toBe("0".repeat(32));
    const queue = new Queue("webhook-deliveries", { connection: t.redis.duplicate(), prefix });
    try {
      const data = (await queue.getJob(deliveryId))?.data as { traceparent?: string };
      expect(data).toEqual({ deliveryId, botId, traceparent: expect.stringMatching(traceparent) });
      // The job continues that trace (its producer span is a child of the row's context).
      expect(traceparent.exec(data.traceparent ?? "")?.[1]).toBe(stored?.[1]);
    } finally {
      await queue.obliterate({ force: true });
      await queue.close();
    }
  });

  it("when the delivery is pending or unknown, or the id is missing, then exit 1 with the sentence", async () => {
    const { botId, deliveryId } = await seedOne("pending");
    const env = { DATABASE_URL: t.url, REDIS_URL: testRedisUrl() };
    expect(await runBotctl(["webhook", "redeliver", botId, deliveryId], env)).toEqual({
      code: 1,
      output: { error: "The delivery is still pending; redeliver it once it is delivered or failed." },
    });
    expect(await runBotctl(["webhook", "redeliver", botId, randomUUID()], env)).toEqual({
      code: 1,
      output: { error: "Delivery not found." },
    });
    const missing = await runBotctl(["webhook", "redeliver", botId], env);
    expect(missing.code).toBe(1);
    expect((missing.output as { error: string }).error).toMatch(/^Missing delivery id/);
  });
});
