/**
 * Per-webhook event choice and `vote.available` reminders in vote-ingest: PUT …/webhook/events (its
 * refusals, what is stored and shown), a cast that creates only the subscribed events' work, and
 * the reminder scheduler making the vote.available delivery when the window ends (on a manual
 * clock), handing it to the queue, and making none for a webhook unsubscribed or removed by then.
 */
import { randomUserId, seedBot } from "@botdir/db/testing";
import { ManualClock } from "@botdir/service-kit";
import { silentLogger } from "@botdir/service-kit/testing";
import type { Express } from "express";
import request from "supertest";
import { createReminderScheduler } from "../src/outbox/reminders.js";
import { INTERNAL_KEY, useIngestFixture } from "./support/votes.js";

const t = useIngestFixture();
const clock = new ManualClock(new Date("2026-11-28T08:00:00.000Z"));
const WINDOW_MS = 12 * 3_600_000;
let app: Express;

beforeAll(() => {
  app = t.app({ clock });
});

const eventsUrl = (botId: string) => `/internal/v1/bots/${botId}/webhook/events`;

function setEvents(botId: string, body: unknown) {
  return request(app)
    .put(eventsUrl(botId))
    .set("Authorization", INTERNAL_KEY)
    .send(body as object);
}

async function botWithWebhook(events?: string[]): Promise<string> {
  const bot = await seedBot(t.db);
  await t.db.pool.query("UPDATE bots SET webhook_url = $2, webhook_secret_encrypted = 'x' WHERE id = $1", [
    bot.id,
    "https://hooks.example.com/vote",
  ]);
  if (events) expect((await setEvents(bot.id, { events })).status).toBe(200);
  return bot.id;
}

function cast(botId: string, userId: string) {
  return request(app)
    .post("/internal/v1/votes")
    .set("Authorization", INTERNAL_KEY)
    .send({ bot_id: botId, user_id: userId });
}

async function windowOf(botId: string, userId: string) {
  return t.db.prisma.voteWindow.findUniqueOrThrow({ where: { botId_userId: { botId, userId } } });
}

async function deliveriesOf(botId: string) {
  return t.db.prisma.delivery.findMany({ where: { botId }, orderBy: { createdAt: "asc" } });
}

function scheduler() {
  return createReminderScheduler({ db: t.db, queue: t.queue, clock, logger: silentLogger, batchSize: 3 });
}

describe("PUT /internal/v1/bots/{id}/webhook/events", () => {
  it("when no events were chosen, then the listing shows vote.create", async () => {
    const bot = await botWithWebhook();
    const res = await request(app).get(`/internal/v1/bots/${bot}`).set("Authorization", INTERNAL_KEY);
    expect(res.body.webhook_events).toEqual(["vote.create"]);
  });

  it("when events are set, then they are stored once each and shown by the listing", async () => {
    const bot = await botWithWebhook();
    const res = await setEvents(bot, { events: ["vote.available", "vote.available"] });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ id: bot, events: ["vote.available"] });
    const shown = await request(app).get(`/internal/v1/bots/${bot}`).set("Authorization", INTERNAL_KEY);
    expect(shown.body.webhook_events).toEqual(["vote.available"]);
    const both = await setEvents(bot, { events: ["vote.available", "vote.create"] });
    expect(both.body.events).toEqual(["vote.create", "vote.available"]);
  });

  it("when an event name is unknown, then 400 listing the known ones and nothing changes", async () => {
    const bot = await botWithWebhook(["vote.available"]);
    const res = await setEvents(bot, { events: ["vote.available", "vote.deleted"] });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "events[1] must be a known event (vote.create, vote.available)." });
    const row = await t.db.prisma.bot.findUniqueOrThrow({ where: { id: bot } });
    expect(row.webhookEvents).toEqual(["vote.available"]);
  });

  it("when the list is empty, missing or not a list, then 400 with one sentence", async () => {
    const bot = await botWithWebhook();
    expect((await setEvents(bot, { events: [] })).body).toEqual({
      error: "events must name at least one event (vote.create, vote.available).",
    });
    expect((await setEvents(bot, {})).body).toEqual({ error: "events is required." });
    const notList = await setEvents(bot, { events: "vote.create" });
    expect(notList.status).toBe(400);
    expect(notList.body).toEqual({ error: "events must be an array." });
    const extra = await setEvents(bot, { events: ["vote.create"], url: "https://x.example" });
    expect(extra.status).toBe(400);
  });

  it("when the bot does not exist, then 404; another method is a 405", async () => {
    const res = await setEvents(randomUserId(), { events: ["vote.create"] });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ error: "Bot not found." });
    const get = await request(app).get(eventsUrl(randomUserId())).set("Authorization", INTERNAL_KEY);
    expect(get.status).toBe(405);
    expect(get.headers.allow).toBe("PUT");
  });
});

describe("a cast and its vote.available reminder", () => {
  it("when the webhook takes only vote.create, then the cast makes its delivery and no reminder", async () => {
    const bot = await botWithWebhook();
    const user = randomUserId();
    expect((await cast(bot, user)).status).toBe(201);
    expect((await windowOf(bot, user)).remindAt).toBeNull();
    expect((await deliveriesOf(bot)).map((d) => d.event)).toEqual(["vote.create"]);
  });

  it("when the webhook takes only vote.available, then no vote.create is made, and the scheduler makes the reminder's delivery once the window ends, not before", async () => {
    const bot = await botWithWebhook(["vote.available"]);
    const user = randomUserId();
    const voted = await cast(bot, user);
    expect(voted.status).toBe(201);
    expect((await windowOf(bot, user)).remindAt?.toISOString()).toBe(voted.body.nextVoteAt);
    expect(await deliveriesOf(bot)).toEqual([]);

    const reminders = scheduler();
    clock.advance(WINDOW_MS - 1_000);
    await reminders.tick();
    expect(await deliveriesOf(bot)).toEqual([]);

    clock.advance(1_000);
    await reminders.tick();
    const made = await deliveriesOf(bot);
    expect(made.map((d) => [d.event, d.state, d.attemptsMade])).toEqual([["vote.available", "pending", 0]]);
    const delivery = made[0]!;
    // Handed to the queue at once (the relay would otherwise do it).
    expect(delivery.handedOffAt).not.toBeNull();
    expect((await t.queue.queue.getJob(delivery.id))?.data).toMatchObject({
      deliveryId: delivery.id,
      botId: bot,
    });
    expect((await windowOf(bot, user)).remindAt).toBeNull();

    await reminders.tick();
    expect(await deliveriesOf(bot)).toHaveLength(1);
  });

  it("when the webhook takes both, then the cast makes vote.create and the window's end makes vote.available, each with its own id", async () => {
    const bot = await botWithWebhook(["vote.create", "vote.available"]);
    await cast(bot, randomUserId());
    clock.advance(WINDOW_MS);
    await scheduler().tick();
    const made = await deliveriesOf(bot);
    expect(made.map((d) => d.event)).toEqual(["vote.create", "vote.available"]);
    expect(made[0]!.voteId).toBe(made[1]!.voteId);
    expect(made[0]!.id).not.toBe(made[1]!.id);
  });

  it("when more reminders are due than one batch holds, then one tick makes them all", async () => {
    const bot = await botWithWebhook(["vote.available"]);
    for (let i = 0; i < 7; i++) await cast(bot, randomUserId());
    clock.advance(WINDOW_MS);
    await scheduler().tick();
    expect(await deliveriesOf(bot)).toHaveLength(7);
  });

  it("when the webhook is unsubscribed or removed before the window ends, then no vote.available is sent", async () => {
    const unsubscribed = await botWithWebhook(["vote.available", "vote.create"]);
    const removed = await botWithWebhook(["vote.available"]);
    await cast(unsubscribed, randomUserId());
    await cast(removed, randomUserId());
    expect((await setEvents(unsubscribed, { events: ["vote.create"] })).status).toBe(200);
    expect(
      (await request(app).delete(`/internal/v1/bots/${removed}/webhook`).set("Authorization", INTERNAL_KEY))
        .status,
    ).toBe(200);
    clock.advance(WINDOW_MS);
    await scheduler().tick();
    expect((await deliveriesOf(unsubscribed)).map((d) => d.event)).toEqual(["vote.create"]);
    expect(await deliveriesOf(removed)).toEqual([]);
  });

  it("when a reminder falls due while the webhook is disabled, then it is dropped: no vote.available, not after re-enabling either; a vote cast while disabled gets no reminder", async () => {
    const bot = await botWithWebhook(["vote.available"]);
    const early = randomUserId();
    await cast(bot, early);
    await t.db.prisma.bot.update({
      where: { id: bot },
      data: { webhookDisabledAt: clock.now(), webhookDisabledReason: "gone" },
    });
    const late = randomUserId();
    expect((await cast(bot, late)).status).toBe(201);
    expect((await windowOf(bot, late)).remindAt).toBeNull();

    clock.advance(WINDOW_MS);
    await scheduler().tick();
    expect((await windowOf(bot, early)).remindAt).toBeNull();
    expect(
      (await request(app).post(`/internal/v1/bots/${bot}/webhook/enable`).set("Authorization", INTERNAL_KEY))
        .status,
    ).toBe(200);
    clock.advance(WINDOW_MS);
    await scheduler().tick();
    expect(await deliveriesOf(bot)).toEqual([]);
  });

  it("when the user votes again after the window, then the new vote's window end replaces the reminder", async () => {
    const bot = await botWithWebhook(["vote.available"]);
    const user = randomUserId();
    await cast(bot, user);
    clock.advance(WINDOW_MS);
    const again = await cast(bot, user);
    expect(again.status).toBe(201);
    expect((await windowOf(bot, user)).remindAt?.toISOString()).toBe(again.body.nextVoteAt);
  });
});
