/**
 * Recovering undelivered votes through the internal endpoint, and the recovery driver that queues
 * them: which votes are sent again (failed deliveries, votes without one), which are not (delivered,
 * pending), the refusals (400, 409 while disabled, 409 naming an overlapping running recovery), the
 * keyset batches with a bounded number in flight, the counts, and enable with recoverSince.
 */
import { randomUUID } from "node:crypto";
import { randomUserId, seedBot, testRedisUrl } from "@botdir/db/testing";
import { ManualClock } from "@botdir/service-kit";
import { silentLogger } from "@botdir/service-kit/testing";
import type { Express } from "express";
import request from "supertest";
import { runBotctl } from "../src/cli/botctl.js";
import { createRecoveryDriver } from "../src/outbox/recovery.js";
import { INTERNAL_KEY, useIngestFixture } from "./support/votes.js";

const t = useIngestFixture();
const clock = new ManualClock(new Date("2026-11-22T10:00:00.000Z"));
let app: Express;

beforeAll(() => {
  app = t.app({ clock });
});

const HOUR = 3_600_000;

async function botWithWebhook(): Promise<string> {
  const bot = await seedBot(t.db);
  await t.db.pool.query("UPDATE bots SET webhook_url = $2, webhook_secret_encrypted = 'x' WHERE id = $1", [
    bot.id,
    "https://hooks.example.com/vote",
  ]);
  return bot.id;
}

/** A vote `hoursAgo` before the clock, with a delivery in `state` (or none). */
async function vote(botId: string, hoursAgo: number, state: "pending" | "delivered" | "failed" | null) {
  const votedAt = new Date(clock.now().getTime() - hoursAgo * HOUR);
  const v = await t.db.prisma.vote.create({ data: { botId, userId: randomUserId(), votedAt } });
  if (state === null) return { voteId: v.id, deliveryId: null };
  const deliveryId = randomUUID();
  await t.db.prisma.delivery.create({
    data: {
      id: deliveryId,
      botId,
      voteId: v.id,
      state,
      attemptsMade: state === "pending" ? 1 : 5,
      nextAttemptAt: votedAt,
      createdAt: votedAt,
      completedAt: state === "pending" ? null : new Date(votedAt.getTime() + HOUR),
      traceparent: `00-${"ab".repeat(16)}-${"cd".repeat(8)}-01`,
    },
  });
  return { voteId: v.id, deliveryId };
}

const recoverUrl = (botId: string) => `/internal/v1/bots/${botId}/webhook/recover`;

function recover(botId: string, body: unknown) {
  return request(app)
    .post(recoverUrl(botId))
    .set("Authorization", INTERNAL_KEY)
    .send(body as object);
}

function driver(options: { batchSize?: number; maxInFlight?: number; maxPerSecond?: number } = {}) {
  return createRecoveryDriver({ db: t.db, queue: t.queue, clock, logger: silentLogger, ...options });
}

async function deliveriesOf(botId: string) {
  const { rows } = await t.db.pool.query<{
    id: string;
    vote_id: string;
    state: string;
    series: number;
    recovery_id: string | null;
    traceparent: string | null;
    handed_off_at: Date | null;
  }>(
    `SELECT id, vote_id::text, state, series, recovery_id, traceparent, handed_off_at
       FROM webhook_deliveries WHERE bot_id = $1 ORDER BY vote_id`,
    [botId],
  );
  return rows;
}

describe("POST /internal/v1/bots/:id/webhook/recover", () => {
  it("when a vote's only delivery is its vote.available, then the recovery sends its vote.create and leaves the vote.available alone", async () => {
    const botId = await botWithWebhook();
    await t.db.pool.query("UPDATE bots SET webhook_events = '{vote.create,vote.available}' WHERE id = $1", [
      botId,
    ]);
    const { voteId } = await vote(botId, 20, null);
    const reminderId = randomUUID();
    await t.db.prisma.delivery.create({
      data: {
        id: reminderId,
        botId,
        voteId,
        event: "vote.available",
        state: "failed",
        attemptsMade: 5,
        nextAttemptAt: clock.now(),
        completedAt: clock.now(),
      },
    });

    const res = await recover(botId, { since: new Date(clock.now().getTime() - 48 * HOUR).toISOString() });

    expect(res.body).toMatchObject({ queued: 1 });
    expect(await driver().tick()).toBe(1);
    const { rows } = await t.db.pool.query<{ event: string; state: string; recovery_id: string | null }>(
      "SELECT event, state, recovery_id FROM webhook_deliveries WHERE vote_id = $1 ORDER BY event",
      [voteId],
    );
    expect(rows).toEqual([
      { event: "vote.available", state: "failed", recovery_id: null },
      { event: "vote.create", state: "pending", recovery_id: res.body.recoveryId },
    ]);
  });

  it("when the webhook does not take vote.create, then 202 with nothing queued and the recovery is done", async () => {
    const botId = await botWithWebhook();
    await t.db.pool.query("UPDATE bots SET webhook_events = '{vote.available}' WHERE id = $1", [botId]);
    await vote(botId, 20, "failed");
    await vote(botId, 10, null);

    const res = await recover(botId, { since: new Date(clock.now().getTime() - 48 * HOUR).toISOString() });

    expect(res.status).toBe(202);
    expect(res.body).toMatchObject({ queued: 0 });
    const status = await request(app)
      .get(`/internal/v1/bots/${botId}/webhook/recoveries/${res.body.recoveryId}`)
      .set("Authorization", INTERNAL_KEY);
    expect(status.body).toMatchObject({ state: "done", queued: 0 });
    await driver().tick();
    expect((await deliveriesOf(botId)).map((r) => r.state)).toEqual(["failed"]);
  });

  it("when votes failed or have no delivery, then 202 counts them and the driver queues exactly those, same delivery ids, a new series and trace", async () => {
    const botId = await botWithWebhook();
    const failed = await vote(botId, 30, "failed");
    const missing = await vote(botId, 20, null);
    const delivered = await vote(botId, 10, "delivered");
    const pending = await vote(botId, 5, "pending");
    const tooOld = await vote(botId, 60, "failed");

    const res = await recover(botId, { since: new Date(clock.now().getTime() - 48 * HOUR).toISOString() });

    expect(res.status).toBe(202);
    expect(res.body).toEqual({ recoveryId: expect.any(String), queued: 2 });
    const queued = await driver().tick();
    expect(queued).toBe(2);

    const rows = await deliveriesOf(botId);
    const byVote = new Map(rows.map((r) => [r.vote_id, r]));
    expect(byVote.get(String(failed.voteId))).toMatchObject({
      id: failed.deliveryId,
      state: "pending",
      series: 1,
      recovery_id: res.body.recoveryId,
    });
    expect(byVote.get(String(failed.voteId))?.traceparent).not.toContain("ab".repeat(16));
    expect(byVote.get(String(missing.voteId))).toMatchObject({
      state: "pending",
      series: 0,
      recovery_id: res.body.recoveryId,
    });
    expect(byVote.get(String(missing.voteId))?.handed_off_at).not.toBeNull();
    expect(byVote.get(String(delivered.voteId))).toMatchObject({ state: "delivered", recovery_id: null });
    expect(byVote.get(String(pending.voteId))).toMatchObject({
      state: "pending",
      series: 0,
      recovery_id: null,
    });
    expect(byVote.get(String(tooOld.voteId))).toMatchObject({ state: "failed", recovery_id: null });
    // Their jobs are on the queue (jobId = delivery id).
    const ids = rows.filter((r) => r.recovery_id).map((r) => r.id);
    for (const id of ids) expect(await t.queue.queue.getJob(id)).toBeDefined();

    const status = await request(app)
      .get(`/internal/v1/bots/${botId}/webhook/recoveries/${res.body.recoveryId}`)
      .set("Authorization", INTERNAL_KEY);
    expect(status.status).toBe(200);
    expect(status.body).toMatchObject({ state: "running", queued: 2, delivered: 0, failed: 0, pending: 2 });

    // Both delivered: the next tick ends the recovery.
    await t.db.pool.query("UPDATE webhook_deliveries SET state = 'delivered' WHERE id = ANY($1::uuid[])", [
      ids,
    ]);
    await driver().tick();
    const done = await request(app)
      .get(`/internal/v1/bots/${botId}/webhook/recoveries/${res.body.recoveryId}`)
      .set("Authorization", INTERNAL_KEY);
    expect(done.body).toMatchObject({ state: "done", queued: 2, delivered: 2, failed: 0, pending: 0 });
    expect(done.body.finishedAt).not.toBeNull();
  });

  it("when there are more votes than a batch, then at most maxInFlight are pending at once and every one is queued in the end", async () => {
    const botId = await botWithWebhook();
    for (let i = 0; i < 25; i++) await vote(botId, 2 + i / 100, "failed");
    const res = await recover(botId, { since: new Date(clock.now().getTime() - 3 * HOUR).toISOString() });
    expect(res.body.queued).toBe(25);

    const d = driver({ batchSize: 4, maxInFlight: 10 });
    let seen = 0;
    for (let round = 0; round < 10 && seen < 25; round++) {
      await d.tick();
      const rows = await deliveriesOf(botId);
      const inFlight = rows.filter((r) => r.state === "pending").length;
      // One batch may pass the bound by less than a batch.
      expect(inFlight).toBeLessThan(10 + 4);
      seen = rows.filter((r) => r.recovery_id === res.body.recoveryId).length;
      await t.db.pool.query(
        "UPDATE webhook_deliveries SET state = 'delivered' WHERE bot_id = $1 AND state = 'pending'",
        [botId],
      );
    }
    expect(seen).toBe(25);
  });

  it("when the pace is 5 a second, then two replicas together queue at most 5 a second since the recovery started, plus a second's worth, and every vote in the end", async () => {
    const botId = await botWithWebhook();
    for (let i = 0; i < 12; i++) await vote(botId, 2 + i / 100, "failed");
    const res = await recover(botId, { since: new Date(clock.now().getTime() - 3 * HOUR).toISOString() });
    const recovered = async () =>
      (await deliveriesOf(botId)).filter((r) => r.recovery_id === res.body.recoveryId).length;

    const [one, two] = [driver({ maxPerSecond: 5 }), driver({ maxPerSecond: 5 })];
    await one.tick();
    expect(await recovered()).toBe(5);
    // No time has passed: no more, whichever replica ticks, however often.
    await two.tick();
    await one.tick();
    expect(await recovered()).toBe(5);
    // Half a second: 7.5 allowed since the start, so two more.
    clock.advance(500);
    await two.tick();
    expect(await recovered()).toBe(7);
    clock.advance(60_000);
    await one.tick();
    expect(await recovered()).toBe(12);
  });

  it("when a recovery over an overlapping window runs, then 409 names it; a disjoint window starts", async () => {
    const botId = await botWithWebhook();
    await vote(botId, 30, "failed");
    await vote(botId, 100, "failed");
    const first = await recover(botId, { since: new Date(clock.now().getTime() - 48 * HOUR).toISOString() });
    expect(first.status).toBe(202);

    const again = await recover(botId, { since: new Date(clock.now().getTime() - 40 * HOUR).toISOString() });
    expect(again.status).toBe(409);
    expect(again.body).toEqual({
      error: `Recovery ${first.body.recoveryId} over an overlapping window is still running.`,
    });

    const disjoint = await recover(botId, {
      since: new Date(clock.now().getTime() - 120 * HOUR).toISOString(),
      until: new Date(clock.now().getTime() - 48 * HOUR).toISOString(),
    });
    expect(disjoint.status).toBe(202);
    expect(disjoint.body.queued).toBe(1);
  });

  it("when the webhook is disabled, then 409 says to enable it first; enable with recoverSince does both", async () => {
    const botId = await botWithWebhook();
    await t.db.pool.query(
      "UPDATE bots SET webhook_disabled_at = $2, webhook_disabled_reason = 'gone' WHERE id = $1",
      [botId, clock.now()],
    );
    await vote(botId, 3, null);
    const since = new Date(clock.now().getTime() - 24 * HOUR).toISOString();

    const refused = await recover(botId, { since });
    expect(refused.status).toBe(409);
    expect(refused.body).toEqual({
      error: "The webhook is disabled; enable it first (recoverSince on enable does both).",
    });

    const enabled = await request(app)
      .post(`/internal/v1/bots/${botId}/webhook/enable`)
      .set("Authorization", INTERNAL_KEY)
      .send({ recoverSince: since });
    expect(enabled.status).toBe(200);
    expect(enabled.body).toEqual({
      id: botId,
      state: "active",
      recovery: { recoveryId: expect.any(String), queued: 1 },
    });
  });

  it.each([["yesterday"], ["2026-11-01T00:00:00Z"], ["2026-11-22T11:00:00Z"], [null], [1700000000000]])(
    "when enable's recoverSince is %j, then 400 names recoverSince and the webhook stays disabled",
    async (recoverSince) => {
      const botId = await botWithWebhook();
      await t.db.pool.query(
        "UPDATE bots SET webhook_disabled_at = $2, webhook_disabled_reason = 'gone' WHERE id = $1",
        [botId, clock.now()],
      );
      const res = await request(app)
        .post(`/internal/v1/bots/${botId}/webhook/enable`)
        .set("Authorization", INTERNAL_KEY)
        .send({ recoverSince });
      expect(res.status).toBe(400);
      expect(res.body).toEqual({
        error: "recoverSince must be an ISO 8601 date-time with a time zone within the last 14 days.",
      });
      const { rows } = await t.db.pool.query<{ webhook_disabled_at: Date | null }>(
        "SELECT webhook_disabled_at FROM bots WHERE id = $1",
        [botId],
      );
      expect(rows[0]?.webhook_disabled_at).not.toBeNull();
    },
  );

  it.each([
    [{}, "since is required."],
    [{ since: "yesterday" }, "since must be an ISO 8601 date-time with a time zone within the last 14 days."],
    [
      { since: "2026-11-01T00:00:00Z" },
      "since must be an ISO 8601 date-time with a time zone within the last 14 days.",
    ],
    [{ since: "2026-11-22T09:00:00Z", until: "2026-11-22T08:00:00Z" }, "until must be after since."],
    [{ since: "2026-11-22T09:00:00Z", extra: 1 }, 'Unknown field "extra".'],
    [[], "The body must be a JSON object with since."],
  ])("when the body is %j, then 400 with one sentence", async (body, sentence) => {
    const botId = await botWithWebhook();
    const res = await recover(botId, body);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: sentence });
  });

  it("when the recovery belongs to another bot or is unknown, then 404", async () => {
    const botId = await botWithWebhook();
    const other = await botWithWebhook();
    await vote(botId, 3, "failed");
    const res = await recover(botId, { since: new Date(clock.now().getTime() - 5 * HOUR).toISOString() });
    for (const url of [
      `/internal/v1/bots/${other}/webhook/recoveries/${res.body.recoveryId}`,
      `/internal/v1/bots/${botId}/webhook/recoveries/${randomUUID()}`,
      `/internal/v1/bots/${botId}/webhook/recoveries/not-a-uuid`,
    ]) {
      const got = await request(app).get(url).set("Authorization", INTERNAL_KEY);
      expect([got.status, got.body]).toEqual([404, { error: "Recovery not found." }]);
    }
  });

  it("when the webhook is disabled while a recovery runs, then the driver stops it", async () => {
    const botId = await botWithWebhook();
    await vote(botId, 3, "failed");
    const res = await recover(botId, { since: new Date(clock.now().getTime() - 5 * HOUR).toISOString() });
    await t.db.pool.query("UPDATE bots SET webhook_disabled_at = $2 WHERE id = $1", [botId, clock.now()]);
    await driver().tick();
    const got = await request(app)
      .get(`/internal/v1/bots/${botId}/webhook/recoveries/${res.body.recoveryId}`)
      .set("Authorization", INTERNAL_KEY);
    expect(got.body).toMatchObject({ state: "stopped", queued: 0 });
  });

  it("botctl webhook recover --since starts one and webhook recovery shows it; a missing --since is a usage line", async () => {
    const botId = await botWithWebhook();
    await vote(botId, 1, "failed");
    const env = { DATABASE_URL: t.url, REDIS_URL: testRedisUrl() };
    const since = new Date(Date.now() - 2 * HOUR).toISOString();
    const started = await runBotctl(["webhook", "recover", botId, "--since", since], env);
    expect(started).toEqual({
      code: 0,
      output: { recoveryId: expect.any(String), queued: expect.any(Number) },
    });
    const id = (started.output as { recoveryId: string }).recoveryId;
    expect(await runBotctl(["webhook", "recovery", botId, id], env)).toMatchObject({
      code: 0,
      output: { recoveryId: id, state: expect.any(String) },
    });
    expect(await runBotctl(["webhook", "recover", botId], env)).toEqual({
      code: 1,
      output: {
        error: "Missing --since. Usage: botctl webhook recover <id> --since <time> [--until <time>]",
      },
    });
    expect(await runBotctl(["webhook", "recover", botId, "--since=yesterday"], env)).toEqual({
      code: 1,
      output: { error: "since must be an ISO 8601 date-time with a time zone within the last 14 days." },
    });
  });
});
