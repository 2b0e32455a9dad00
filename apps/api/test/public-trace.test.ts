/**
 * The public edge starts its own traces: a caller's `traceparent` never chooses the trace of what
 * a request does (a redelivery's new series, the request's log lines), so one owner cannot file
 * their lines under a trace id another owner quotes to support. Tracing runs as in production
 * without a collector: ids only (docs/tracing.md).
 */
import { randomUUID } from "node:crypto";
import { randomUserId, seedBot } from "@botdir/db/testing";
import { startTelemetry } from "@botdir/service-kit";
import request from "supertest";
import { useHarness } from "./support.js";

startTelemetry({
  OTEL_SDK_DISABLED: true,
  OTEL_TRACES_SAMPLER: "parentbased_always_on",
  OTEL_TRACES_SAMPLER_ARG: 1,
  OTEL_SERVICE_NAME: "botdir-api",
});

const { h, app } = useHarness({ limits: { deliveries: 1_000, redeliver: 1_000 } });
const CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const callerTraceparent = { traceparent: `00-${CALLER_TRACE}-00f067aa0ba902b7-01` };

async function failedDelivery() {
  const bot = await seedBot(h.t.db);
  await h.t.db.pool.query("UPDATE bots SET webhook_url = $2, webhook_secret_encrypted = 'x' WHERE id = $1", [
    bot.id,
    "https://hooks.example.com/vote",
  ]);
  const vote = await h.t.db.prisma.vote.create({
    data: { botId: bot.id, userId: randomUserId(), votedAt: h.clock.now() },
  });
  const id = randomUUID();
  await h.t.db.prisma.delivery.create({
    data: {
      id,
      botId: bot.id,
      voteId: vote.id,
      state: "failed",
      attemptsMade: 5,
      nextAttemptAt: h.clock.now(),
    },
  });
  return { botId: bot.id, deliveryId: id, auth: { Authorization: `Bearer ${bot.token}` } };
}

const redeliver = (botId: string, deliveryId: string, headers: Record<string, string>) =>
  request(app).post(`/api/v1/bots/${botId}/webhook/deliveries/${deliveryId}/redeliver`).set(headers);

describe("a caller's traceparent at the public API", () => {
  it("when an owner redelivers under a traceparent, then the new series runs in a new trace and no line carries the caller's", async () => {
    const { botId, deliveryId, auth } = await failedDelivery();
    const res = await redeliver(botId, deliveryId, { ...auth, ...callerTraceparent });
    expect(res.status).toBe(202);
    const row = await h.t.db.prisma.delivery.findUniqueOrThrow({ where: { id: deliveryId } });
    expect(row.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/);
    expect(row.traceparent).not.toContain(CALLER_TRACE);
    expect(h.logger.text()).not.toContain(CALLER_TRACE);
  });

  it("when an unauthenticated request sends a traceparent, then no line logs the caller's trace id", async () => {
    const { botId, deliveryId } = await failedDelivery();
    for (const auth of [{}, { Authorization: "not-a-real-token-0123456789" }] as Record<string, string>[]) {
      expect((await redeliver(botId, deliveryId, { ...auth, ...callerTraceparent })).status).toBe(401);
    }
    const check = await request(app)
      .get(`/api/v1/bots/${botId}/check`)
      .query({ userId: randomUserId() })
      .set(callerTraceparent);
    expect(check.status).toBe(401);
    expect(h.logger.lines.filter((l) => l.msg === "request").length).toBeGreaterThanOrEqual(3);
    expect(h.logger.text()).not.toContain(CALLER_TRACE);
  });
});
