import { listMigrations, migrate } from "../src/migrate.js";
import { createTestDatabase, type TestDatabase } from "../src/testing.js";

let t: TestDatabase;

beforeAll(async () => {
  t = await createTestDatabase();
  await t.db.prisma.bot.create({ data: { id: "123456789012345678", status: "approved" } });
});

afterAll(async () => {
  await t.drop();
});

async function insertVote(userId: string): Promise<bigint> {
  const vote = await t.db.prisma.vote.create({
    data: { botId: "123456789012345678", userId, votedAt: new Date("2026-11-21T05:00:00.123Z") },
  });
  return vote.id;
}

describe("the vote log", () => {
  it("accepts appends and keeps millisecond precision", async () => {
    const id = await insertVote("111111111111111111");
    const row = await t.db.prisma.vote.findUniqueOrThrow({ where: { id } });
    expect(row.votedAt.toISOString()).toBe("2026-11-21T05:00:00.123Z");
  });

  it("when a row is updated, then the database refuses it", async () => {
    const id = await insertVote("222222222222222222");
    await expect(
      t.db.pool.query("UPDATE vote_log SET user_id = '333333333333333333' WHERE id = $1", [id]),
    ).rejects.toThrow(/append-only/);
    await expect(t.db.prisma.vote.update({ where: { id }, data: { votedAt: new Date() } })).rejects.toThrow(
      /append-only/,
    );
  });

  it("when a row is deleted or the table truncated, then the database refuses it", async () => {
    const id = await insertVote("444444444444444444");
    await expect(t.db.pool.query("DELETE FROM vote_log WHERE id = $1", [id])).rejects.toThrow(/append-only/);
    await expect(t.db.pool.query("TRUNCATE vote_log CASCADE")).rejects.toThrow(/append-only/);
    expect(await t.db.prisma.vote.count({ where: { id } })).toBe(1);
  });
});

describe("constraints", () => {
  it("refuses a bot id that is not 17 to 19 digits", async () => {
    await expect(t.db.prisma.bot.create({ data: { id: "12345" } })).rejects.toThrow();
    await expect(t.db.prisma.bot.create({ data: { id: "12345678901234567a" } })).rejects.toThrow();
  });

  it("refuses the same token hash on two bots", async () => {
    const hash = "a".repeat(64);
    await t.db.prisma.bot.create({ data: { id: "223456789012345678", tokenHash: hash } });
    await expect(
      t.db.prisma.bot.create({ data: { id: "323456789012345678", tokenHash: hash } }),
    ).rejects.toThrow();
  });

  it("records each attempt number of a delivery once, and only numbers 1 to 5", async () => {
    const voteId = await insertVote("555555555555555555");
    const delivery = await t.db.prisma.delivery.create({
      data: {
        id: "6f1c1f0e-8a59-4f43-9d25-8d7a4b0f2d11",
        botId: "123456789012345678",
        voteId,
        nextAttemptAt: new Date(),
      },
    });
    const attempt = {
      deliveryId: delivery.id,
      botId: "123456789012345678",
      series: 0,
      attemptNumber: 1,
      durationMs: 5,
      attemptedAt: new Date(),
    };
    await t.db.prisma.attempt.create({ data: attempt });
    await expect(t.db.prisma.attempt.create({ data: attempt })).rejects.toThrow();
    await expect(t.db.prisma.attempt.create({ data: { ...attempt, attemptNumber: 6 } })).rejects.toThrow();
  });
});

describe("migrations", () => {
  it("are recorded, and a second run applies nothing", async () => {
    const result = await migrate(t.url);
    expect(result.applied).toEqual([]);
    expect(result.alreadyApplied).toEqual(await listMigrations());
  });
});
