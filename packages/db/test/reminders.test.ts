/**
 * The vote.available scheduler's statement (botdir_schedule_reminders through scheduleReminders):
 * due reminders are made into deliveries once, by one of any number of concurrent callers, only
 * for bots whose webhook still takes vote.available, and their remind_at is cleared either way.
 */
import { createDb, type Db } from "../src/client.js";
import { scheduleReminders } from "../src/reminders.js";
import { createTestDatabase, randomUserId, seedBot, type TestDatabase } from "../src/testing.js";

let t: TestDatabase;
let second: Db;

beforeAll(async () => {
  t = await createTestDatabase();
  second = createDb({ url: t.url });
});

afterAll(async () => {
  await second?.close();
  await t.drop();
});

const NOW = new Date("2026-11-28T12:00:00.000Z");
const WINDOW_MS = 12 * 60 * 60 * 1000;

/** A bot with a webhook taking `events` (no URL at all with `url: null`). */
async function botWith(events: string[], options: { url?: string | null; disabled?: boolean } = {}) {
  const bot = await seedBot(t.db);
  const url = options.url === undefined ? "https://hooks.example.com/v" : options.url;
  await t.db.prisma.bot.update({
    where: { id: bot.id },
    data: {
      webhookUrl: url,
      webhookSecretEncrypted: url ? "x" : null,
      webhookEvents: events,
      webhookDisabledAt: options.disabled ? NOW : null,
    },
  });
  return bot.id;
}

/** A vote of a new user whose reminder is due at `remindAt` (its window row, as a cast writes it). */
async function voteWithReminder(botId: string, remindAt: Date): Promise<bigint> {
  const votedAt = new Date(remindAt.getTime() - WINDOW_MS);
  const vote = await t.db.prisma.vote.create({ data: { botId, userId: randomUserId(), votedAt } });
  await t.db.prisma.voteWindow.create({
    data: { botId, userId: vote.userId, votedAt, voteId: vote.id, remindAt },
  });
  return vote.id;
}

async function deliveriesOf(voteIds: bigint[]) {
  return t.db.prisma.delivery.findMany({ where: { voteId: { in: voteIds } }, orderBy: { voteId: "asc" } });
}

async function pendingReminders(voteIds: bigint[]): Promise<number> {
  return t.db.prisma.voteWindow.count({ where: { voteId: { in: voteIds }, remindAt: { not: null } } });
}

/** Runs the scheduler until a batch takes nothing (other tests' due rows are taken too). */
async function drain(db: Db, batch: number): Promise<string[]> {
  const made: string[] = [];
  for (;;) {
    const { claimed, deliveries } = await scheduleReminders(db, NOW, batch);
    made.push(...deliveries.map((d) => d.id));
    if (claimed === 0) return made;
  }
}

describe("scheduleReminders", () => {
  it("when reminders are due, then each gets one pending vote.available delivery and its remind_at is cleared; one not due is left", async () => {
    const bot = await botWith(["vote.create", "vote.available"]);
    const due = [
      await voteWithReminder(bot, new Date(NOW.getTime() - 1_000)),
      await voteWithReminder(bot, NOW),
    ];
    const later = await voteWithReminder(bot, new Date(NOW.getTime() + 1_000));

    const made = await drain(t.db, 500);

    const rows = await deliveriesOf(due);
    expect(rows.map((r) => [r.event, r.state, r.attemptsMade])).toEqual([
      ["vote.available", "pending", 0],
      ["vote.available", "pending", 0],
    ]);
    expect(made).toEqual(expect.arrayContaining(rows.map((r) => r.id)));
    expect(await pendingReminders(due)).toBe(0);
    expect(await deliveriesOf([later])).toEqual([]);
    expect(await pendingReminders([later])).toBe(1);
  });

  it("when two schedulers run at once over many due reminders, then every reminder is made into exactly one delivery", async () => {
    const bot = await botWith(["vote.available"]);
    const votes: bigint[] = [];
    for (let i = 0; i < 120; i++) votes.push(await voteWithReminder(bot, new Date(NOW.getTime() - i * 10)));

    const [a, b] = await Promise.all([drain(t.db, 7), drain(second, 7)]);

    const rows = await deliveriesOf(votes);
    expect(rows).toHaveLength(120);
    expect(new Set(rows.map((r) => r.voteId)).size).toBe(120);
    // Neither caller reported a delivery the other made.
    const reported = [...a, ...b];
    expect(new Set(reported).size).toBe(reported.length);
    expect(reported).toEqual(expect.arrayContaining(rows.map((r) => r.id)));
    expect(await pendingReminders(votes)).toBe(0);
  });

  it("when the webhook no longer takes vote.available, was removed or is disabled, then no delivery is made and the reminder is gone", async () => {
    const unsubscribed = await botWith(["vote.create"]);
    const removed = await botWith(["vote.available"], { url: null });
    const disabled = await botWith(["vote.available"], { disabled: true });
    const votes = [
      await voteWithReminder(unsubscribed, NOW),
      await voteWithReminder(removed, NOW),
      await voteWithReminder(disabled, NOW),
    ];

    await drain(t.db, 500);

    expect(await deliveriesOf(votes)).toEqual([]);
    expect(await pendingReminders(votes)).toBe(0);
  });

  it("when the vote already has a vote.available delivery, then no second one is made; its vote.create is a delivery of its own", async () => {
    const bot = await botWith(["vote.create", "vote.available"]);
    const vote = await voteWithReminder(bot, NOW);
    await t.db.prisma.delivery.create({
      data: { id: "0193a0a0-0000-7000-8000-000000000001", botId: bot, voteId: vote, nextAttemptAt: NOW },
    });
    await t.db.prisma.delivery.create({
      data: {
        id: "0193a0a0-0000-7000-8000-000000000002",
        botId: bot,
        voteId: vote,
        event: "vote.available",
        nextAttemptAt: NOW,
      },
    });

    const made = await drain(t.db, 500);

    const rows = await deliveriesOf([vote]);
    expect(rows.map((r) => r.event).sort()).toEqual(["vote.available", "vote.create"]);
    expect(made).not.toContain("0193a0a0-0000-7000-8000-000000000002");
    await expect(
      t.db.prisma.delivery.create({
        data: { id: "0193a0a0-0000-7000-8000-000000000003", botId: bot, voteId: vote, nextAttemptAt: NOW },
      }),
    ).rejects.toThrow();
  });

  it("refuses an unknown event on a delivery and on a webhook, and an empty event list", async () => {
    const bot = await botWith(["vote.create"]);
    const vote = await voteWithReminder(bot, new Date(NOW.getTime() + WINDOW_MS));
    await expect(
      t.db.prisma.delivery.create({
        data: {
          id: "0193a0a0-0000-7000-8000-000000000004",
          botId: bot,
          voteId: vote,
          event: "vote.delete",
          nextAttemptAt: NOW,
        },
      }),
    ).rejects.toThrow();
    await expect(botWith(["vote.delete"])).rejects.toThrow();
    await expect(botWith([])).rejects.toThrow();
  });
});
