/**
 * POST /stats and PUT /commands read the bot row they write under a row lock (to know whether the
 * value changed). Done in one statement (a locking CTE under the UPDATE) this deadlocked when
 * several posts for one bot met while other transactions key-share locked its row, as every vote's
 * foreign keys do: 50–170 deadlocks per case below. The writes now lock in one
 * statement and write in the next (migration 20261123150000_bot_writes_lock_then_update).
 * The service functions are called directly: the API's batcher would run a deadlock victim once
 * more and hide it.
 */
import { hashToken } from "@botdir/db";
import { createTestDatabase, seedBot, type TestDatabase } from "@botdir/db/testing";
import { writeCommands, writeStats } from "../src/services/bots.js";

let t: TestDatabase;

beforeAll(async () => {
  t = await createTestDatabase({ poolMax: 16 });
});

afterAll(async () => {
  await t.drop();
});

/** Runs `writers` loops of `each` writes while 3 connections key-share lock the bot's row in short transactions. */
async function underKeyShareLocks(
  botId: string,
  writers: number,
  each: number,
  write: (writer: number, n: number) => Promise<unknown>,
): Promise<{ results: unknown[]; errors: string[] }> {
  let writing = true;
  const lockers = Array.from({ length: 3 }, async () => {
    while (writing) {
      const client = await t.db.pool.connect();
      try {
        await client.query("BEGIN");
        await client.query("SELECT 1 FROM bots WHERE id = $1 FOR KEY SHARE", [botId]);
        await new Promise((resolve) => setTimeout(resolve, Math.random() * 3));
        await client.query("COMMIT");
      } finally {
        client.release();
      }
    }
  });
  const results: unknown[] = [];
  const errors: string[] = [];
  await Promise.all(
    Array.from({ length: writers }, async (_, writer) => {
      for (let n = 0; n < each; n++) {
        try {
          results.push(await write(writer, n));
        } catch (error) {
          const e = error as { code?: string; message?: string };
          errors.push(`${e.code ?? ""} ${e.message ?? String(error)}`);
        }
      }
    }),
  );
  writing = false;
  await Promise.all(lockers);
  return { results, errors };
}

describe("concurrent writes of one bot row while its votes key-share lock it", () => {
  it("when 8 connections post stats for one bot 300 times each, then no post deadlocks, every one reports a change, and the stored count is one of the last posted", async () => {
    const bot = await seedBot(t.db);
    const tokenHash = hashToken(bot.token!);
    const { results, errors } = await underKeyShareLocks(bot.id, 8, 300, async (writer, n) => {
      const [answer] = await writeStats(t.db, [
        { tokenHash, botId: bot.id, serverCount: writer * 1_000 + n, now: new Date() },
      ]);
      return answer;
    });
    expect(errors).toEqual([]);
    expect(results).toHaveLength(8 * 300);
    // Every post sets a count no other post sets, so each one changed the stored count.
    expect(results.every((r) => (r as { changed: boolean } | null)?.changed === true)).toBe(true);
    const stored = await t.db.prisma.bot.findUniqueOrThrow({ where: { id: bot.id } });
    expect(Array.from({ length: 8 }, (_, w) => BigInt(w * 1_000 + 299))).toContain(stored.serverCount);
  }, 60_000);

  it("when 8 connections post per-shard stats for one bot, then no post deadlocks and the total is the sum of every shard's last count", async () => {
    const bot = await seedBot(t.db);
    const tokenHash = hashToken(bot.token!);
    const { errors } = await underKeyShareLocks(bot.id, 8, 150, (shard, n) =>
      writeStats(t.db, [
        { tokenHash, botId: bot.id, serverCount: n + 1, shard: { id: shard, count: 8 }, now: new Date() },
      ]),
    );
    expect(errors).toEqual([]);
    const stored = await t.db.prisma.bot.findUniqueOrThrow({
      where: { id: bot.id },
      include: { shardCounts: { orderBy: { shardId: "asc" } } },
    });
    expect(stored.shardCounts.map((s) => [s.shardId, s.serverCount])).toEqual(
      Array.from({ length: 8 }, (_, shard) => [shard, 150n]),
    );
    expect(stored.serverCount).toBe(8n * 150n);
  }, 60_000);

  it("when 8 connections replace one bot's commands 150 times each, then no write deadlocks and the stored list is one of the last written", async () => {
    const bot = await seedBot(t.db);
    const tokenHash = hashToken(bot.token!);
    const list = (writer: number, n: number) => [{ name: `w${writer}`, description: `write ${n}` }];
    const { results, errors } = await underKeyShareLocks(bot.id, 8, 150, (writer, n) =>
      writeCommands(t.db, { tokenHash, botId: bot.id, commands: list(writer, n), now: new Date() }),
    );
    expect(errors).toEqual([]);
    expect(results.every((r) => (r as { botId: string } | null)?.botId === bot.id)).toBe(true);
    const stored = await t.db.prisma.bot.findUniqueOrThrow({ where: { id: bot.id } });
    expect(Array.from({ length: 8 }, (_, w) => list(w, 149))).toContainEqual(stored.commands);
  }, 60_000);
});
