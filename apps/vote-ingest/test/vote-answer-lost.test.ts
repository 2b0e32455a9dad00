/**
 * A vote statement whose answer is lost after PostgreSQL committed it (node-postgres' query
 * timeout fires while PostgreSQL stalls; the statement goes on and commits): the batcher runs each
 * vote of the failed batch again alone, and each finds its own vote already recorded. Each is
 * answered as recorded, once, not "already voted"; a vote that another request recorded is still
 * refused.
 */
import { createDb, type Db } from "@botdir/db";
import { directUrlOf, randomUserId, seedBot, useTestDatabase } from "@botdir/db/testing";
import { ApiError } from "@botdir/schema";
import { ManualClock } from "@botdir/service-kit";
import { silentLogger } from "@botdir/service-kit/testing";
import { createVotes } from "../src/services/votes.js";
import { deliveriesOf, logCount, setWebhook } from "./support/votes.js";

const t = useTestDatabase();
let db: Db;
/** Vote statements still to run and then fail as if their answer were lost. */
let loseAnswers = 0;

beforeAll(() => {
  db = createDb({ url: t.url, directUrl: directUrlOf(t.url), poolMax: 4, connectionTimeoutMs: 5_000 });
  const query = db.pool.query.bind(db.pool) as (...args: unknown[]) => Promise<unknown>;
  // The real statement runs and commits on the real PostgreSQL; only its answer is dropped.
  db.pool.query = (async (...args: unknown[]) => {
    const config = args[0] as { name?: string } | undefined;
    if (config?.name === "ingest.cast-vote" && loseAnswers > 0) {
      loseAnswers -= 1;
      await query(...args);
      throw new Error("Query read timeout");
    }
    return query(...args);
  }) as typeof db.pool.query;
});

afterAll(async () => {
  await db.close();
});

describe("a vote batch whose answer was lost after it committed", () => {
  it("when the batch is run again vote by vote, then each vote is answered as recorded, with one log row and one delivery each", async () => {
    const bot = await seedBot(t.db);
    await setWebhook(t.db, bot.id);
    const clock = new ManualClock("2026-11-28T10:00:00.000Z");
    const votes = createVotes({ db, clock, logger: silentLogger });
    const users = [randomUserId(), randomUserId(), randomUserId()];
    loseAnswers = 1;

    // One event-loop turn: one batch, one statement.
    const outcomes = await Promise.all(users.map((u) => votes.castVote(bot.id, u, null)));

    expect(loseAnswers).toBe(0);
    expect(outcomes.map((o) => o.vote)).toEqual(
      users.map((u) => ({ user_id: u, voted_at: "2026-11-28T10:00:00.000Z" })),
    );
    for (const u of users) expect(await logCount(t.db, bot.id, u)).toBe(1);
    const deliveries = await deliveriesOf(t.db, bot.id);
    expect(deliveries).toHaveLength(3);
    expect(new Set(outcomes.map((o) => o.deliveryId))).toEqual(new Set(deliveries.map((d) => d.id)));
  });

  it("when the bot's webhook takes no vote.create (no delivery row to tell), then each vote is still answered as recorded, with one log row each and no delivery", async () => {
    const bot = await seedBot(t.db);
    const clock = new ManualClock("2026-11-28T12:00:00.000Z");
    const votes = createVotes({ db, clock, logger: silentLogger });
    const users = [randomUserId(), randomUserId()];
    loseAnswers = 1;

    const outcomes = await Promise.all(users.map((u) => votes.castVote(bot.id, u, null)));

    expect(loseAnswers).toBe(0);
    expect(outcomes.map((o) => o.deliveryId)).toEqual([null, null]);
    for (const u of users) expect(await logCount(t.db, bot.id, u)).toBe(1);
    expect(await deliveriesOf(t.db, bot.id)).toHaveLength(0);
  });

  it("when a vote at the same instant comes after one whose batch answered, then it is refused as already voted, webhook or not", async () => {
    for (const webhook of [true, false]) {
      const bot = await seedBot(t.db);
      if (webhook) await setWebhook(t.db, bot.id);
      const clock = new ManualClock("2026-11-28T13:00:00.000Z");
      const votes = createVotes({ db, clock, logger: silentLogger });
      const user = randomUserId();

      await votes.castVote(bot.id, user, null);
      await expect(votes.castVote(bot.id, user, null)).rejects.toMatchObject({ status: 409 });
      expect(await logCount(t.db, bot.id, user)).toBe(1);
    }
  });

  it("when the same user's vote was recorded by another request at the same instant, then this one is still refused as already voted", async () => {
    const bot = await seedBot(t.db);
    await setWebhook(t.db, bot.id);
    const clock = new ManualClock("2026-11-28T11:00:00.000Z");
    const votes = createVotes({ db, clock, logger: silentLogger });
    const user = randomUserId();

    // Same bot, same user, same instant: two batches (conflictKey), the second refused.
    const results = await Promise.allSettled([
      votes.castVote(bot.id, user, null),
      votes.castVote(bot.id, user, null),
    ]);

    expect(results.map((r) => r.status).sort()).toEqual(["fulfilled", "rejected"]);
    const refused = results.find((r) => r.status === "rejected") as PromiseRejectedResult;
    expect(refused.reason).toBeInstanceOf(ApiError);
    expect((refused.reason as ApiError).status).toBe(409);
    expect(await logCount(t.db, bot.id, user)).toBe(1);
    expect(await deliveriesOf(t.db, bot.id)).toHaveLength(1);
  });
});
