import { randomUserId, seedBot, testRedisPrefix, testRedisUrl, useTestDatabase } from "@botdir/db/testing";
import { ManualClock } from "@botdir/service-kit";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { runBotctl } from "../src/cli/botctl.js";
import { castVoteFromCli } from "../src/cli/vote-cast.js";
import { deliveriesOf, logCount, setWebhook } from "./support/votes.js";

const t = useTestDatabase();

describe("botctl vote cast", () => {
  it("when run with a bot and a user, then it prints the body of POST /internal/v1/votes and records the vote", async () => {
    const bot = await seedBot(t.db);
    const userId = randomUserId();
    const env = { DATABASE_URL: t.url, REDIS_URL: testRedisUrl() };

    const first = await runBotctl(["vote", "cast", bot.id, userId], env);
    const second = await runBotctl(["vote", "cast", bot.id, userId], env);

    expect(first.code).toBe(0);
    const body = first.output as { vote: { user_id: string; voted_at: string }; nextVoteAt: string };
    expect(body.vote.user_id).toBe(userId);
    expect(Date.parse(body.nextVoteAt) - Date.parse(body.vote.voted_at)).toBe(12 * 60 * 60 * 1000);
    const { rows } = await t.db.pool.query<{ voted_at: Date }>(
      "SELECT voted_at FROM vote_windows WHERE bot_id = $1 AND user_id = $2",
      [bot.id, userId],
    );
    expect(rows[0]?.voted_at.toISOString()).toBe(body.vote.voted_at);
    expect(second).toEqual({
      code: 1,
      output: {
        error: "The user has already voted for this bot in the last 12 hours.",
        nextVoteAt: body.nextVoteAt,
      },
    });
    expect(await logCount(t.db, bot.id)).toBe(1);
  });

  it("when an id is bad or missing, then exit 1 with an error naming it", async () => {
    const env = { DATABASE_URL: t.url, REDIS_URL: testRedisUrl() };

    const badUser = await runBotctl(["vote", "cast", "123456789012345678", "12"], env);
    const missingUser = await runBotctl(["vote", "cast", "123456789012345678"], env);

    expect(badUser.code).toBe(1);
    expect((badUser.output as { error: string }).error).toMatch(/^The user id must be/);
    expect(missingUser.code).toBe(1);
    expect((missingUser.output as { error: string }).error).toMatch(/^Missing user id/);
  });

  it("when the bot has a webhook URL, then the CLI path creates the delivery and hands it to the queue", async () => {
    const bot = await seedBot(t.db);
    await setWebhook(t.db, bot.id);
    const prefix = `${testRedisPrefix()}bull`;
    const clock = new ManualClock("2026-11-21T08:30:00.456Z");

    const result = await castVoteFromCli(
      { db: t.db, redisUrl: testRedisUrl(), queuePrefix: prefix, clock },
      bot.id,
      randomUserId(),
    );

    expect(result.vote.voted_at).toBe("2026-11-21T08:30:00.456Z");
    const [delivery] = await deliveriesOf(t.db, bot.id);
    expect(delivery?.handed_off_at?.toISOString()).toBe("2026-11-21T08:30:00.456Z");
    const connection = new Redis(testRedisUrl(), { maxRetriesPerRequest: 1 });
    const queue = new Queue("webhook-deliveries", { connection, prefix });
    try {
      // runBotctl (the first test) started tracing in this process, ids only, as botctl does: as a
      // vote the site casts without a traceparent, no ids are made, the row keeps no context and
      // the job carries none (its trace is the one the delivery id names).
      const id = delivery?.id ?? "missing";
      const { rows } = await t.db.pool.query("SELECT traceparent FROM webhook_deliveries WHERE id = $1", [
        id,
      ]);
      expect(rows).toEqual([{ traceparent: null }]);
      expect((await queue.getJob(id))?.data).toEqual({ deliveryId: id, botId: bot.id });
    } finally {
      await queue.obliterate({ force: true });
      await queue.close();
      connection.disconnect();
    }
  });

  it("when the bot is unknown, then the CLI path throws the same 404 as the endpoint", async () => {
    await expect(
      castVoteFromCli({ db: t.db, redisUrl: testRedisUrl() }, "123456789012345678", randomUserId()),
    ).rejects.toMatchObject({ status: 404, message: "Bot not found." });
  });
});
