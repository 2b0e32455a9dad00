/**
 * The widget's 30-day vote count comes from per-hour counters (vote_counts, kept by the log's insert
 * trigger) plus the partial first hour read from the log. For any vote history and any instant it
 * must equal the definition: the votes of the log after now - 30 days.
 */
import { randomUserId, seedBot } from "@botdir/db/testing";
import fc from "fast-check";
import { widgetCounts } from "../src/services/bots.js";
import { useHarness } from "./support.js";

const { h } = useHarness();

const HOUR = 60 * 60 * 1000;
const DAY = 24 * HOUR;
const WINDOW = 30 * DAY;

async function countFromLog(botId: string, now: Date): Promise<number> {
  const { rows } = await h.t.db.pool.query<{ n: number }>(
    "SELECT count(*) AS n FROM vote_log WHERE bot_id = $1 AND voted_at > $2",
    [botId, new Date(now.getTime() - WINDOW)],
  );
  return Number(rows[0]?.n);
}

// Vote instants relative to `now`: anywhere from 32 days before to a day after, and, often, right
// at the edges that matter (the window's start, the hour boundaries around it, now itself).
const offset = fc.oneof(
  fc.integer({ min: -32 * DAY, max: DAY }),
  fc.constantFrom(-WINDOW, -WINDOW - 1, -WINDOW + 1, 0, -1, 1),
  fc.integer({ min: -2, max: 2 }).map((k) => -WINDOW + k * HOUR),
  fc.integer({ min: -WINDOW - 2 * HOUR, max: -WINDOW + 2 * HOUR }),
);

describe("the widget's vote count from counters", () => {
  it("when votes of any history were appended in any batches, then the count equals the count over the log", async () => {
    const base = Date.parse("2026-11-21T12:00:00.000Z");
    await fc.assert(
      fc.asyncProperty(
        // Several statements (batches) of votes, and the instant the badge is asked for.
        fc.array(fc.array(offset, { minLength: 1, maxLength: 12 }), { minLength: 0, maxLength: 5 }),
        fc.integer({ min: 0, max: 7 * DAY }),
        fc.integer({ min: -2 * DAY, max: 2 * DAY }),
        async (batches, nowShift, askShift) => {
          const bot = await seedBot(h.t.db);
          const now = base + nowShift;
          for (const batch of batches) {
            await h.t.db.prisma.vote.createMany({
              data: batch.map((o) => ({ botId: bot.id, userId: randomUserId(), votedAt: new Date(now + o) })),
            });
          }
          // Asked at the instant of the votes and at another one (the window has moved since).
          for (const at of [new Date(now), new Date(now + askShift)]) {
            const counts = await widgetCounts(h.t.db, bot.id, at);
            expect(counts?.votes).toBe(await countFromLog(bot.id, at));
          }
        },
      ),
      { numRuns: 60 },
    );
  });

  it("when votes of several bots are appended in one statement, then each bot's counters hold only its own votes", async () => {
    const [a, b] = [await seedBot(h.t.db), await seedBot(h.t.db)];
    const now = h.clock.now();
    await h.t.db.prisma.vote.createMany({
      data: [a.id, b.id, a.id, a.id].map((botId, i) => ({
        botId,
        userId: randomUserId(),
        votedAt: new Date(now.getTime() - i * HOUR),
      })),
    });
    expect((await widgetCounts(h.t.db, a.id, now))?.votes).toBe(3);
    expect((await widgetCounts(h.t.db, b.id, now))?.votes).toBe(1);
    const { rows } = await h.t.db.pool.query<{ n: number }>(
      "SELECT coalesce(sum(votes), 0) AS n FROM vote_counts WHERE bot_id = $1",
      [a.id],
    );
    expect(Number(rows[0]?.n)).toBe(3);
  });

  it("when the log is asked to forget a vote, then it refuses and the counters are unchanged", async () => {
    const bot = await seedBot(h.t.db);
    const now = h.clock.now();
    await h.t.db.prisma.vote.create({ data: { botId: bot.id, userId: randomUserId(), votedAt: now } });
    await expect(h.t.db.pool.query("DELETE FROM vote_log WHERE bot_id = $1", [bot.id])).rejects.toThrow(
      /append-only/,
    );
    expect((await widgetCounts(h.t.db, bot.id, now))?.votes).toBe(1);
  });
});
