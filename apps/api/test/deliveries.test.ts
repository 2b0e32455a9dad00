/**
 * The owner's webhook delivery log and redelivery on the public API: the bot token's auth, 404 and
 * rate-limit rules, the list's per-attempt outcome, and what a redelivery writes (a fresh series,
 * left for vote-ingest's outbox relay to hand to the dispatcher).
 */
import { randomUUID } from "node:crypto";
import type { Db } from "@botdir/db";
import { randomUserId, seedBot } from "@botdir/db/testing";
import { DeliveryAttemptsResponse, RedeliverResponse } from "@botdir/schema";
import request from "supertest";
import { useHarness } from "./support.js";

const { h, app } = useHarness({ limits: { deliveries: 1_000, redeliver: 1_000 } });

async function newBot() {
  const bot = await seedBot(h.t.db);
  await h.t.db.pool.query("UPDATE bots SET webhook_url = $2, webhook_secret_encrypted = 'x' WHERE id = $1", [
    bot.id,
    "https://hooks.example.com/vote",
  ]);
  return { id: bot.id, auth: { Authorization: `Bearer ${bot.token}` } };
}

type Attempt = { statusCode: number | null; errorKind: string | null; minute: number };

/** One delivery in `state` with its attempts, as the dispatcher writes them. */
async function seedDelivery(
  db: Db,
  botId: string,
  state: "pending" | "delivered" | "failed",
  attempts: Attempt[],
  event: "vote.create" | "vote.available" = "vote.create",
) {
  const base = new Date("2026-11-21T10:00:00.000Z").getTime();
  const vote = await db.prisma.vote.create({
    data: { botId, userId: randomUserId(), votedAt: new Date(base) },
  });
  const id = randomUUID();
  await db.prisma.delivery.create({
    data: {
      id,
      botId,
      voteId: vote.id,
      state,
      event,
      attemptsMade: attempts.length,
      nextAttemptAt: new Date(base),
      handedOffAt: new Date(base),
    },
  });
  for (const [i, a] of attempts.entries()) {
    await db.prisma.attempt.create({
      data: {
        deliveryId: id,
        botId,
        series: 0,
        attemptNumber: i + 1,
        statusCode: a.statusCode,
        errorKind: a.errorKind,
        durationMs: 5,
        attemptedAt: new Date(base + a.minute * 60_000),
        traceId: TRACE_ID,
      },
    });
  }
  return id;
}

/** The trace id every seeded attempt was made under (the owner quotes it; docs/tracing.md). */
const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";

const FAILED: Attempt[] = [{ statusCode: 500, errorKind: "http_status", minute: 0 }];

const list = (id: string, auth: Record<string, string>) =>
  request(app).get(`/api/v1/bots/${id}/webhook/deliveries`).set(auth);
const redeliver = (id: string, deliveryId: string, auth: Record<string, string>, target = app) =>
  request(target).post(`/api/v1/bots/${id}/webhook/deliveries/${deliveryId}/redeliver`).set(auth);

describe("GET /api/v1/bots/{id}/webhook/deliveries", () => {
  it("when a 500 was followed by a successful retry, then each attempt shows its own outcome beside the delivery's state", async () => {
    const { id, auth } = await newBot();
    const deliveryId = await seedDelivery(h.t.db, id, "delivered", [
      { statusCode: 500, errorKind: "http_status", minute: 0 },
      { statusCode: 204, errorKind: null, minute: 1 },
    ]);
    const res = await list(id, auth);
    expect(res.status).toBe(200);
    expect(res.headers["ratelimit-limit"]).toBe("1000");
    expect(DeliveryAttemptsResponse.strict().safeParse(res.body).success).toBe(true);
    expect(res.body.attempts).toEqual([
      {
        deliveryId,
        attempt: 2,
        series: 0,
        statusCode: 204,
        errorKind: null,
        outcome: "delivered",
        deliveryState: "delivered",
        attemptedAt: "2026-11-21T10:01:00.000Z",
        traceId: TRACE_ID,
        test: false,
        event: "vote.create",
        recovered: false,
      },
      {
        deliveryId,
        attempt: 1,
        series: 0,
        statusCode: 500,
        errorKind: "http_status",
        outcome: "failed",
        deliveryState: "delivered",
        attemptedAt: "2026-11-21T10:00:00.000Z",
        traceId: TRACE_ID,
        test: false,
        event: "vote.create",
        recovered: false,
      },
    ]);
  });

  it("when a vote's vote.available was delivered and a test event was sent, then each entry names its event: vote.create, vote.available, null for the test", async () => {
    const { id, auth } = await newBot();
    const created = await seedDelivery(h.t.db, id, "delivered", [
      { statusCode: 204, errorKind: null, minute: 0 },
    ]);
    const available = await seedDelivery(
      h.t.db,
      id,
      "delivered",
      [{ statusCode: 204, errorKind: null, minute: 1 }],
      "vote.available",
    );
    const testId = randomUUID();
    await h.t.db.prisma.testAttempt.create({
      data: {
        id: testId,
        botId: id,
        statusCode: 204,
        delivered: true,
        attemptedAt: new Date("2026-11-21T10:02:00.000Z"),
      },
    });
    const res = await list(id, auth);
    expect(res.status).toBe(200);
    expect(DeliveryAttemptsResponse.strict().safeParse(res.body).success).toBe(true);
    expect(
      res.body.attempts.map((a: { deliveryId: string; test: boolean; event: string | null }) => [
        a.deliveryId,
        a.test,
        a.event,
      ]),
    ).toEqual([
      [testId, true, null],
      [available, false, "vote.available"],
      [created, false, "vote.create"],
    ]);
  });

  it("when there are twelve attempts, then the ten newest, newest first, and none of another bot's", async () => {
    const { id, auth } = await newBot();
    const other = await newBot();
    const attempts = Array.from({ length: 4 }, (_, i) => ({
      statusCode: 503,
      errorKind: "http_status",
      minute: i,
    }));
    for (let i = 0; i < 3; i++) await seedDelivery(h.t.db, id, "pending", attempts);
    await seedDelivery(h.t.db, other.id, "failed", FAILED);
    const res = await list(id, auth);
    expect(res.status).toBe(200);
    expect(res.body.attempts).toHaveLength(10);
    const times = res.body.attempts.map((a: { attemptedAt: string }) => a.attemptedAt);
    expect([...times].sort().reverse()).toEqual(times);
  });
});

describe("POST /api/v1/bots/{id}/webhook/deliveries/{deliveryId}/redeliver", () => {
  it("when the delivery failed, then 202 and a fresh series is due now, waiting for the outbox relay", async () => {
    const { id, auth } = await newBot();
    const deliveryId = await seedDelivery(h.t.db, id, "failed", FAILED);
    const res = await redeliver(id, deliveryId, auth);
    expect(res.status).toBe(202);
    expect(res.headers["cache-control"]).toBe("no-store");
    expect(RedeliverResponse.strict().parse(res.body)).toEqual({ deliveryId, state: "pending", series: 1 });
    const row = await h.t.db.prisma.delivery.findUniqueOrThrow({ where: { id: deliveryId } });
    expect(row).toMatchObject({
      state: "pending",
      attemptsMade: 0,
      series: 1,
      nextAttemptAt: h.clock.now(),
      handedOffAt: null,
      completedAt: null,
    });
    // The attempt log keeps the first series; the list says its delivery is pending again.
    const listed = await list(id, auth);
    expect(listed.body.attempts[0]).toMatchObject({
      deliveryId,
      series: 0,
      outcome: "failed",
      deliveryState: "pending",
    });
  });

  it("when the delivery is pending, then 409 with one sentence and nothing changes", async () => {
    const { id, auth } = await newBot();
    const deliveryId = await seedDelivery(h.t.db, id, "pending", FAILED);
    const res = await redeliver(id, deliveryId, auth);
    expect(res.status).toBe(409);
    expect(res.headers["x-botdir-conflict"]).toBe("delivery_pending");
    expect(res.body).toEqual({
      error: "The delivery is still pending; redeliver it once it is delivered or failed.",
    });
    const row = await h.t.db.prisma.delivery.findUniqueOrThrow({ where: { id: deliveryId } });
    expect(row.series).toBe(0);
    expect(row.handedOffAt).not.toBeNull();
  });
});

describe("auth, 404 and rate-limit matrix of both endpoints", () => {
  const calls = {
    list: (id: string, _deliveryId: string, auth: Record<string, string>, target = app) =>
      request(target).get(`/api/v1/bots/${id}/webhook/deliveries`).set(auth),
    redeliver: (id: string, deliveryId: string, auth: Record<string, string>, target = app) =>
      redeliver(id, deliveryId, auth, target),
  };

  it.each(Object.keys(calls) as (keyof typeof calls)[])(
    "%s: when the token is missing or unknown, then 401 and the delivery is untouched",
    async (name) => {
      const { id } = await newBot();
      const deliveryId = await seedDelivery(h.t.db, id, "failed", FAILED);
      for (const auth of [{}, { Authorization: "not-a-real-token-0123456789" }] as Record<string, string>[]) {
        const res = await calls[name](id, deliveryId, auth);
        expect(res.status).toBe(401);
        expect(res.body).toEqual({ error: "Invalid token." });
      }
      expect((await h.t.db.prisma.delivery.findUniqueOrThrow({ where: { id: deliveryId } })).state).toBe(
        "failed",
      );
    },
  );

  it.each(Object.keys(calls) as (keyof typeof calls)[])(
    "%s: when the path id is another bot's, unknown or not an id, then the same 404 and nothing changes",
    async (name) => {
      const mine = await newBot();
      const theirs = await newBot();
      const deliveryId = await seedDelivery(h.t.db, theirs.id, "failed", FAILED);
      for (const pathId of [theirs.id, "123456789012345678", "abc"]) {
        const res = await calls[name](pathId, deliveryId, mine.auth);
        expect(res.status).toBe(404);
        expect(res.body).toEqual({ error: "Bot not found." });
      }
      expect((await h.t.db.prisma.delivery.findUniqueOrThrow({ where: { id: deliveryId } })).state).toBe(
        "failed",
      );
    },
  );

  it("redeliver: when the delivery is unknown, another bot's or not a UUID, then the same 404", async () => {
    const mine = await newBot();
    const theirs = await newBot();
    const theirDelivery = await seedDelivery(h.t.db, theirs.id, "failed", FAILED);
    for (const deliveryId of [randomUUID(), theirDelivery, "not-a-uuid", "1%20OR%201=1"]) {
      const res = await redeliver(mine.id, deliveryId, mine.auth);
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ error: "Delivery not found." });
    }
    expect((await h.t.db.prisma.delivery.findUniqueOrThrow({ where: { id: theirDelivery } })).state).toBe(
      "failed",
    );
  });

  it.each([
    ["list", "deliveries"],
    ["redeliver", "redeliver"],
  ] as const)("%s: when the token is over its limit, then 429 with retryAfter", async (name, endpoint) => {
    const limited = h.app({ limits: { [endpoint]: 1 } });
    const { id, auth } = await newBot();
    const deliveryId = await seedDelivery(h.t.db, id, "failed", FAILED);
    const first = await calls[name](id, deliveryId, auth, limited);
    expect(first.status).toBe(name === "list" ? 200 : 202);
    const second = await calls[name](id, deliveryId, auth, limited);
    expect(second.status).toBe(429);
    expect(second.body).toEqual({ error: "Rate limit exceeded.", retryAfter: expect.any(Number) });
    expect(second.body.retryAfter).toBeGreaterThan(0);
    expect(second.headers["retry-after"]).toBe(String(second.body.retryAfter));
  });

  it("the default limits are 60 a minute for the list and 10 for redelivery", async () => {
    const defaults = h.app();
    const { id, auth } = await newBot();
    const deliveryId = await seedDelivery(h.t.db, id, "failed", FAILED);
    expect((await calls.list(id, deliveryId, auth, defaults)).headers["ratelimit-limit"]).toBe("60");
    expect((await calls.redeliver(id, deliveryId, auth, defaults)).headers["ratelimit-limit"]).toBe("10");
  });
});
