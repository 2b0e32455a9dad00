import { seedBot, useTestDatabase } from "@botdir/db/testing";

const t = useTestDatabase();

describe("test fixtures", () => {
  it("seed an approved bot whose token is stored only as a hash", async () => {
    const bot = await seedBot(t.db);
    const row = await t.db.prisma.bot.findUniqueOrThrow({ where: { id: bot.id } });
    expect(bot.token).toEqual(expect.any(String));
    expect(row.tokenHash).toMatch(/^[0-9a-f]{64}$/);
    expect(row.tokenHash).not.toContain(bot.token);
  });

  it("seed a pending bot without a token", async () => {
    const bot = await seedBot(t.db, { status: "pending" });
    expect(bot.token).toBeNull();
  });
});
