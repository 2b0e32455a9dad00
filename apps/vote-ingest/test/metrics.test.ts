import { parseMetrics, randomUserId, sampleValue, seedBot } from "@botdir/db/testing";
import { ManualClock } from "@botdir/service-kit";
import { silentLogger } from "@botdir/service-kit/testing";
import type { Express } from "express";
import request from "supertest";
import { createIngestMetrics } from "../src/metrics.js";
import { createOutboxRelay } from "../src/outbox/relay.js";
import { INTERNAL_KEY, setWebhook, useIngestFixture } from "./support/votes.js";

const t = useIngestFixture();

async function scrape(app: Express) {
  const res = await request(app).get("/metrics");
  expect(res.status).toBe(200);
  expect(res.headers["content-type"]).toMatch(/^text\/plain; version=0\.0\.4/);
  return { text: res.text, samples: parseMetrics(res.text) };
}

async function pendingInDb(): Promise<number> {
  const { rows } = await t.db.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM webhook_deliveries WHERE state = 'pending'",
  );
  return rows[0]?.n ?? 0;
}

describe("vote-ingest GET /metrics", () => {
  it("when votes with a webhook wait in the outbox, then the backlog, its age and the relay's counters are reported, and requests by route pattern", async () => {
    const clock = new ManualClock("2026-11-21T12:00:00.000Z");
    const relay = createOutboxRelay({
      db: t.db,
      queue: t.queue,
      clock,
      logger: silentLogger,
      staleMs: 60_000,
    });
    const metrics = createIngestMetrics({ outbox: relay });
    const app = t.app({ clock, metrics });
    const bot = await seedBot(t.db);
    await setWebhook(t.db, bot.id);
    const user = randomUserId();
    const vote = (userId: string) =>
      request(app)
        .post("/internal/v1/votes")
        .set("Authorization", INTERNAL_KEY)
        .send({ bot_id: bot.id, user_id: userId });

    expect((await vote(user)).status).toBe(201);
    expect((await vote(randomUserId())).status).toBe(201);
    expect((await vote(user)).status).toBe(409);
    await t.queue.flush();
    clock.advance(90_000);
    const handed = await relay.tick();

    const { text, samples } = await scrape(app);
    const votes = { app: "vote-ingest", route: "/internal/v1/votes", method: "POST" };
    expect(sampleValue(samples, "botdir_http_requests_total", { ...votes, status: "201" })).toBe(2);
    expect(sampleValue(samples, "botdir_http_requests_total", { ...votes, status: "409" })).toBe(1);
    expect(sampleValue(samples, "botdir_outbox_pending_deliveries")).toBe(await pendingInDb());
    expect(sampleValue(samples, "botdir_outbox_pending_deliveries")).toBeGreaterThanOrEqual(2);
    expect(sampleValue(samples, "botdir_outbox_oldest_due_age_seconds")).toBeGreaterThanOrEqual(90);
    expect(sampleValue(samples, "botdir_metrics_source_up", { source: "outbox" })).toBe(1);
    expect(sampleValue(samples, "botdir_outbox_relay_ticks_total")).toBe(1);
    expect(sampleValue(samples, "botdir_outbox_relay_handed_off_total")).toBe(handed);
    expect(sampleValue(samples, "botdir_outbox_relay_redis_available")).toBe(1);
    expect(text).not.toContain(bot.id);
    expect(text).not.toContain(user);
  });

  it("when a management request fails inside the bots router, then its label is the mount path plus the route pattern", async () => {
    const metrics = createIngestMetrics();
    const app = t.app({ clock: new ManualClock("2026-11-21T12:00:00.000Z"), metrics });
    const bot = await seedBot(t.db);

    const shown = await request(app).get(`/internal/v1/bots/${bot.id}`).set("Authorization", INTERNAL_KEY);
    expect(shown.status).toBe(200);
    const bad = await request(app)
      .put(`/internal/v1/bots/${bot.id}/webhook`)
      .set("Authorization", INTERNAL_KEY)
      .send({ url: "not a url" });
    expect(bad.status).toBe(400);
    const noKey = await request(app).get(`/internal/v1/bots/${bot.id}`);
    expect(noKey.status).toBe(401);

    const { text, samples } = await scrape(app);
    const count = (route: string, status: string) =>
      sampleValue(samples, "botdir_http_requests_total", { route, status });
    expect(count("/internal/v1/bots/:id", "200")).toBe(1);
    expect(count("/internal/v1/bots/:id/webhook", "400")).toBe(1);
    expect(count("/internal/v1/bots/*", "401")).toBe(1);
    expect(text).not.toContain(bot.id);
  });

  it("when the outbox query does not answer within the scrape timeout, then the scrape still answers, with the source down and the backlog NaN (unknown), never a stale number", async () => {
    const metrics = createIngestMetrics({
      outbox: {
        backlog: () => new Promise(() => {}),
        stats: () => ({ ticks: 0, handedOff: 0, skipped: 0, errors: 0, redisAvailable: false }),
      },
      scrapeTimeoutMs: 50,
    });
    const { samples } = await scrape(t.app({ clock: new ManualClock("2026-11-21T12:00:00.000Z"), metrics }));

    expect(sampleValue(samples, "botdir_metrics_source_up", { source: "outbox" })).toBe(0);
    expect(sampleValue(samples, "botdir_outbox_pending_deliveries")).toBeNaN();
    expect(sampleValue(samples, "botdir_outbox_oldest_due_age_seconds")).toBeNaN();
    expect(sampleValue(samples, "botdir_outbox_relay_redis_available")).toBe(0);
  });
});
