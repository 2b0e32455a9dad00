import type { Server } from "node:http";
import {
  parseMetrics,
  randomBotId,
  randomUserId,
  sampleValue,
  seedBot,
  watchQueries,
} from "@botdir/db/testing";
import { ManualClock } from "@botdir/service-kit";
import request from "supertest";
import { createIngestMetrics } from "../src/metrics.js";
import { deliveriesOf, INTERNAL_KEY, logCount, setWebhook, useIngestFixture } from "./support/votes.js";

const TWELVE_HOURS = 12 * 60 * 60 * 1000;
const START = "2026-11-21T12:00:00.123Z";

const t = useIngestFixture({ poolMax: 10 });
const clock = new ManualClock(START);
let server: Server;

beforeAll(() => {
  server = t.app({ clock }).listen(0);
});

afterAll(async () => {
  await new Promise((r) => server.close(r));
});

beforeEach(() => clock.set(START));

function cast(body: unknown, key: string | null = INTERNAL_KEY) {
  const req = request(server).post("/internal/v1/votes");
  if (key !== null) req.set("Authorization", key);
  return req.send(body as object);
}

async function windowOf(botId: string, userId: string) {
  const { rows } = await t.db.pool.query<{ voted_at: Date; vote_id: number }>(
    "SELECT voted_at, vote_id FROM vote_windows WHERE bot_id = $1 AND user_id = $2",
    [botId, userId],
  );
  return rows[0];
}

describe("POST /internal/v1/votes", () => {
  it("when an approved bot gets a vote, then 201 with the vote, and the window and the log hold the same instant", async () => {
    const bot = await seedBot(t.db);
    const userId = randomUserId();

    const res = await cast({ bot_id: bot.id, user_id: userId });

    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      vote: { user_id: userId, voted_at: START },
      nextVoteAt: "2026-11-22T00:00:00.123Z",
    });
    const window = await windowOf(bot.id, userId);
    expect(window?.voted_at.toISOString()).toBe(START);
    const { rows } = await t.db.pool.query<{ id: number; voted_at: Date }>(
      "SELECT id, voted_at FROM vote_log WHERE bot_id = $1",
      [bot.id],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]?.voted_at.toISOString()).toBe(START);
    expect(window?.vote_id).toBe(rows[0]?.id);
    expect(await deliveriesOf(t.db, bot.id)).toEqual([]); // no webhook URL, no delivery
  });

  it("when the user votes again inside the window, then 409 with the same nextVoteAt and nothing written", async () => {
    const bot = await seedBot(t.db);
    const userId = randomUserId();
    const first = await cast({ bot_id: bot.id, user_id: userId });
    clock.advance(3 * 60 * 60 * 1000);

    const second = await cast({ bot_id: bot.id, user_id: userId });

    expect(second.status).toBe(409);
    expect(second.headers["x-botdir-conflict"]).toBe("already_voted");
    expect(second.body).toEqual({
      error: "The user has already voted for this bot in the last 12 hours.",
      nextVoteAt: first.body.nextVoteAt,
    });
    expect(await logCount(t.db, bot.id, userId)).toBe(1);
    expect((await windowOf(bot.id, userId))?.voted_at.toISOString()).toBe(START);
  });

  it("when 20 votes of one user arrive at once, then exactly one is recorded, with one log row and one delivery", async () => {
    const bot = await seedBot(t.db);
    await setWebhook(t.db, bot.id);
    const userId = randomUserId();

    const responses = await Promise.all(
      Array.from({ length: 20 }, () => cast({ bot_id: bot.id, user_id: userId })),
    );

    const statuses = responses.map((r) => r.status).sort();
    expect(statuses.filter((s) => s === 201)).toHaveLength(1);
    expect(statuses.filter((s) => s === 409)).toHaveLength(19);
    const nextVoteAts = new Set(responses.map((r) => r.body.nextVoteAt));
    expect([...nextVoteAts]).toEqual(["2026-11-22T00:00:00.123Z"]);
    expect(await logCount(t.db, bot.id, userId)).toBe(1);
    expect(await deliveriesOf(t.db, bot.id)).toHaveLength(1);
  });

  it("when 12 hours have passed since the vote, then the window reopens and the next vote is recorded", async () => {
    const bot = await seedBot(t.db);
    const userId = randomUserId();
    await cast({ bot_id: bot.id, user_id: userId });

    clock.set(new Date(Date.parse(START) + TWELVE_HOURS - 1));
    const justBefore = await cast({ bot_id: bot.id, user_id: userId });
    clock.advance(1);
    const atTwelveHours = await cast({ bot_id: bot.id, user_id: userId });

    expect(justBefore.status).toBe(409);
    expect(atTwelveHours.status).toBe(201);
    expect(atTwelveHours.body.vote.voted_at).toBe("2026-11-22T00:00:00.123Z");
    expect(atTwelveHours.body.nextVoteAt).toBe("2026-11-22T12:00:00.123Z");
    expect((await windowOf(bot.id, userId))?.voted_at.toISOString()).toBe("2026-11-22T00:00:00.123Z");
    expect(await logCount(t.db, bot.id, userId)).toBe(2);
  });

  it("when the bot has a webhook URL, then a pending delivery is created and handed to the queue with jobId = delivery id", async () => {
    const bot = await seedBot(t.db);
    await setWebhook(t.db, bot.id);
    const userId = randomUserId();

    const res = await cast({ bot_id: bot.id, user_id: userId });
    await t.queue.flush();

    expect(res.status).toBe(201);
    const [delivery, ...others] = await deliveriesOf(t.db, bot.id);
    expect(others).toEqual([]);
    expect(delivery).toMatchObject({ state: "pending", attempts_made: 0 });
    expect(delivery?.next_attempt_at.toISOString()).toBe(START);
    expect(delivery?.handed_off_at?.toISOString()).toBe(START);
    // A version 7 UUID (time-ordered ids keep the deliveries' index writes on the newest pages).
    expect(delivery?.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    const job = await t.queue.queue.getJob(delivery?.id ?? "missing");
    expect(job?.id).toBe(delivery?.id);
    expect(job?.name).toBe("vote.create");
    expect(job?.data).toEqual({ deliveryId: delivery?.id, botId: bot.id });
    expect(job?.opts.attempts).toBe(5);
  });

  it("when the bot does not exist or is not approved, then 404 Bot not found and nothing written", async () => {
    const pending = await seedBot(t.db, { status: "pending" });
    const userId = randomUserId();

    const unknown = await cast({ bot_id: randomBotId(), user_id: userId });
    const notApproved = await cast({ bot_id: pending.id, user_id: userId });

    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ error: "Bot not found." });
    expect(notApproved.status).toBe(404);
    expect(notApproved.body).toEqual({ error: "Bot not found." });
    expect(await logCount(t.db, pending.id)).toBe(0);
    expect(await windowOf(pending.id, userId)).toBeUndefined();
  });

  it.each([
    ["missing", null],
    ["wrong", "not-the-internal-key-0123456789"],
    ["empty Bearer", "Bearer "],
  ])("when the internal key is %s, then 401 and nothing written", async (_case, key) => {
    const bot = await seedBot(t.db);

    const res = await cast({ bot_id: bot.id, user_id: randomUserId() }, key);

    expect(res.status).toBe(401);
    expect(res.body).toEqual({ error: "Invalid internal API key." });
    expect(await logCount(t.db, bot.id)).toBe(0);
  });

  it("when the key is sent as Bearer <key>, then it is accepted", async () => {
    const bot = await seedBot(t.db);

    const res = await cast({ bot_id: bot.id, user_id: randomUserId() }, `Bearer ${INTERNAL_KEY}`);

    expect(res.status).toBe(201);
  });

  it.each([
    [{ bot_id: "abc", user_id: "123456789012345678" }, /^bot_id must be/],
    [{ bot_id: "123456789012345678" }, /^user_id is required\.$/],
    [{ bot_id: "123456789012345678", user_id: 1234567890 }, /^user_id must be a string\.$/],
    [{ bot_id: "123456789012345678", user_id: "12345" }, /^user_id must be a user id/],
    [[], /^The body must be/],
  ])("when the body is %j, then 400 naming the field", async (body, message) => {
    const res = await cast(body);

    expect(res.status).toBe(400);
    expect(Object.keys(res.body)).toEqual(["error"]);
    expect(res.body.error).toMatch(message);
  });

  it("when the body is not JSON, then 400 and not a 500", async () => {
    const broken = await request(server)
      .post("/internal/v1/votes")
      .set("Authorization", INTERNAL_KEY)
      .set("Content-Type", "application/json")
      .send("{nope");
    const form = await request(server)
      .post("/internal/v1/votes")
      .set("Authorization", INTERNAL_KEY)
      .type("form")
      .send("bot_id=1");

    expect(broken.status).toBe(400);
    expect(broken.body).toEqual({ error: "Invalid JSON body." });
    expect(form.status).toBe(400);
    expect(form.body).toEqual({ error: "Content-Type must be application/json." });
  });

  it("when another method is used, then 405 with Allow: POST", async () => {
    const res = await request(server).get("/internal/v1/votes").set("Authorization", INTERNAL_KEY);

    expect(res.status).toBe(405);
    expect(res.headers.allow).toBe("POST");
  });
});

describe("concurrent votes: one statement and one commit per batch", () => {
  it("when votes of many users and bots arrive together, then each gets its own answer, log row, window and delivery", async () => {
    const bots = await Promise.all(Array.from({ length: 6 }, () => seedBot(t.db)));
    for (const bot of bots.slice(0, 3)) await setWebhook(t.db, bot.id);
    const users = Array.from({ length: 3 }, () => randomUserId());
    // Inside its window (voted an hour ago): refused. Window expired (voted 12 h ago): recorded.
    const [inside, expired] = [randomUserId(), randomUserId()];
    clock.set(new Date(Date.parse(START) - TWELVE_HOURS));
    expect((await cast({ bot_id: bots[0]!.id, user_id: expired })).status).toBe(201);
    clock.set(new Date(Date.parse(START) - 60 * 60 * 1000));
    expect((await cast({ bot_id: bots[1]!.id, user_id: inside })).status).toBe(201);
    clock.set(START);

    // One statement in flight at a time, each 50 ms slower: the wave queues up into batches.
    const metrics = createIngestMetrics();
    const batched = t.app({ clock, metrics, batching: { maxInFlight: 1, maxBatch: 64 } });
    const slowServer = batched.listen(0);
    const pool = t.db.pool;
    const queries = watchQueries(pool, { delayMs: 50 });
    const statements = queries.names;
    try {
      const post = (bot_id: string, user_id: string) =>
        request(slowServer)
          .post("/internal/v1/votes")
          .set("Authorization", INTERNAL_KEY)
          .send({ bot_id, user_id });
      const pairs = bots.flatMap((bot) => users.map((user) => [bot.id, user] as const));
      const [fresh, twice, refused, reopened, unknown] = await Promise.all([
        Promise.all(pairs.map(([bot, user]) => post(bot, user))),
        Promise.all([post(bots[2]!.id, inside), post(bots[2]!.id, inside)]),
        post(bots[1]!.id, inside),
        post(bots[0]!.id, expired),
        post(randomBotId(), users[0]!),
      ]);
      queries.restore(); // the checks below run at full speed

      for (const res of fresh) {
        expect(res.status).toBe(201);
        expect(res.body.vote.voted_at).toBe(START);
      }
      expect(twice.map((r) => r.status).sort()).toEqual([201, 409]);
      expect(refused.status).toBe(409);
      expect(refused.body.nextVoteAt).toBe(
        new Date(Date.parse(START) - 60 * 60 * 1000 + TWELVE_HOURS).toISOString(),
      );
      expect(reopened.status).toBe(201);
      expect(unknown.status).toBe(404);

      // Every recorded vote: one log row, the window pointing at it, a delivery when there is a webhook.
      const recorded = [...pairs, [bots[2]!.id, inside] as const, [bots[0]!.id, expired] as const];
      for (const [bot, user] of recorded) {
        const { rows } = await pool.query<{ id: string; vote_id: string }>(
          `SELECT l.id, w.vote_id, w.voted_at FROM vote_log l
             JOIN vote_windows w ON w.bot_id = l.bot_id AND w.user_id = l.user_id
            WHERE l.bot_id = $1 AND l.user_id = $2 AND l.voted_at = $3`,
          [bot, user, START],
        );
        expect(rows).toHaveLength(1);
        expect(String(rows[0]?.vote_id)).toBe(String(rows[0]?.id));
      }
      for (const bot of bots.slice(0, 3)) {
        const expected = users.length + (bot === bots[0] ? 1 : 0) + (bot === bots[2] ? 1 : 0);
        const deliveries = await deliveriesOf(t.db, bot.id);
        expect(deliveries.filter((d) => d.created_at.toISOString() === START)).toHaveLength(expected);
      }
      for (const bot of bots.slice(3)) expect(await deliveriesOf(t.db, bot.id)).toEqual([]);

      // 23 votes in far fewer statements (the two votes of one user for one bot never share one).
      const casts = statements.filter((n) => n === "ingest.cast-vote");
      expect(casts.length).toBeGreaterThanOrEqual(2); // the same user's two votes for one bot
      expect(casts.length).toBeLessThanOrEqual(12);
      const samples = parseMetrics(await metrics.registry.metrics());
      const label = { app: "vote-ingest", statement: "cast-vote" };
      expect(sampleValue(samples, "botdir_batch_statements_total", label)).toBe(casts.length);
      expect(sampleValue(samples, "botdir_batch_requests_total", label)).toBe(23);
    } finally {
      queries.restore();
      await new Promise((r) => slowServer.close(r));
    }
  });
});
