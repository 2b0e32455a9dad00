/**
 * Per-shard stats: each shard of a bot posts its own count (shard_id + shard_count + a count), and
 * the bot's server_count is the sum over its shards' latest counts, in the one /stats statement.
 */

import { hashToken } from "@botdir/db";
import { nestedPlans, planNodes, seedBot, watchQueries } from "@botdir/db/testing";
import request from "supertest";
import { writeStats } from "../src/services/bots.js";
import { useHarness } from "./support.js";

const { h, app } = useHarness({ limits: { stats: 1_000 } });

async function newBot() {
  const bot = await seedBot(h.t.db);
  return { id: bot.id, token: bot.token!, auth: { Authorization: bot.token! } };
}

const post = (id: string, auth: Record<string, string>, body: object) =>
  request(app).post(`/api/v1/bots/${id}/stats`).set(auth).send(body);

/** The bot's total and its shards' counts by shard id (null: a shard below the highest that has not posted). */
async function stored(id: string): Promise<{ total: number | null; shards: (number | null)[] }> {
  const { rows } = await h.t.db.pool.query<{ server_count: string | null }>(
    "SELECT server_count FROM bots WHERE id = $1",
    [id],
  );
  const { rows: shardRows } = await h.t.db.pool.query<{ shard_id: number; server_count: string }>(
    "SELECT shard_id, server_count FROM bot_shard_counts WHERE bot_id = $1",
    [id],
  );
  const shards: (number | null)[] = [];
  for (const row of shardRows) {
    while (shards.length <= row.shard_id) shards.push(null);
    shards[row.shard_id] = Number(row.server_count);
  }
  const total = rows[0]!.server_count;
  return { total: total === null ? null : Number(total), shards };
}

describe("POST /api/v1/bots/{id}/stats from sharded bots", () => {
  it("when three shards post their counts, then server_count is their sum", async () => {
    const { id, auth } = await newBot();
    for (const [shard, count] of [
      [0, 100],
      [1, 250],
      [2, 75],
    ]) {
      const res = await post(id, auth, { server_count: count, shard_id: shard, shard_count: 3 });
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ success: true, server_count: count });
    }
    expect(await stored(id)).toEqual({ total: 425, shards: [100, 250, 75] });
  });

  it("when a shard posts again, then only its own count is replaced", async () => {
    const { id, auth } = await newBot();
    await post(id, auth, { server_count: 100, shard_id: 0, shard_count: 3 });
    await post(id, auth, { server_count: 250, shard_id: 1, shard_count: 3 });
    await post(id, auth, { server_count: 75, shard_id: 2, shard_count: 3 });
    await post(id, auth, { server_count: 260, shard_id: 1, shard_count: 3 });
    expect(await stored(id)).toEqual({ total: 435, shards: [100, 260, 75] });
  });

  it("when the clients use discord.bots.gg's or discordbotlist.com's spellings, then the shards sum too", async () => {
    const { id, auth } = await newBot();
    await post(id, auth, { guildCount: 40, shardId: 1, shardCount: 2 });
    await post(id, auth, { guilds: 60, shard_id: 0 });
    expect(await stored(id)).toEqual({ total: 100, shards: [60, 40] });
  });

  it("when shards have posted and a total is posted, then the total is stored and the shard counts cleared", async () => {
    const { id, auth } = await newBot();
    await post(id, auth, { server_count: 100, shard_id: 0, shard_count: 2 });
    await post(id, auth, { server_count: 200, shard_id: 1, shard_count: 2 });
    await post(id, auth, { server_count: 1000 });
    expect(await stored(id)).toEqual({ total: 1000, shards: [] });
    // A later shard post starts from its own count alone.
    await post(id, auth, { server_count: 30, shard_id: 1, shard_count: 2 });
    expect(await stored(id)).toEqual({ total: 30, shards: [null, 30] });
  });

  it("when a per-shard array is posted with a shard id, then it is a total and clears the shard counts", async () => {
    const { id, auth } = await newBot();
    await post(id, auth, { server_count: 100, shard_id: 0, shard_count: 2 });
    await post(id, auth, { shards: [5, 6, 7], shard_id: 0, shard_count: 3, server_count: 0 });
    expect(await stored(id)).toEqual({ total: 18, shards: [] });
  });

  it("when shard_count shrinks, then the shards beyond it are dropped from the sum", async () => {
    const { id, auth } = await newBot();
    for (let shard = 0; shard < 4; shard++) {
      await post(id, auth, { server_count: 10 * (shard + 1), shard_id: shard, shard_count: 4 });
    }
    expect((await stored(id)).total).toBe(100);
    await post(id, auth, { server_count: 15, shard_id: 0, shard_count: 2 });
    expect(await stored(id)).toEqual({ total: 35, shards: [15, 20] });
  });

  it("when the shard id or count is invalid, then 400 with one sentence and nothing changes", async () => {
    const { id, auth } = await newBot();
    await post(id, auth, { server_count: 100, shard_id: 0, shard_count: 2 });
    for (const [body, sentence] of [
      [{ server_count: 1, shard_id: 2, shard_count: 2 }, "shard_id must be less than shard_count (2)."],
      [{ server_count: 1, shard_id: -1, shard_count: 2 }, "shard_id must not be negative."],
      [{ server_count: 1, shard_id: "1", shard_count: 2 }, "shard_id must be a number."],
      [{ server_count: 1, shard_id: 0, shard_count: 0 }, "shard_count must be at least 1."],
      [{ server_count: 1, shard_id: 0, shard_count: 1e9 }, "shard_count must be at most 65536."],
    ] as const) {
      const res = await post(id, auth, body);
      expect(res.status).toBe(400);
      expect(res.body).toEqual({ error: sentence });
    }
    expect(await stored(id)).toEqual({ total: 100, shards: [100] });
  });

  it("when the sum does not change, then the page cache is kept, and the check-in time is written on every post", async () => {
    const { id, auth } = await newBot();
    const key = `${h.prefix}page:bot:${id}`;
    await post(id, auth, { server_count: 10, shard_id: 0, shard_count: 2 });
    await post(id, auth, { server_count: 20, shard_id: 1, shard_count: 2 });
    await h.redis.set(key, "<rendered page>");
    h.clock.advance(60_000);
    await post(id, auth, { server_count: 20, shard_id: 1, shard_count: 2 });
    expect(await h.redis.get(key)).toBe("<rendered page>");
    const row = await h.t.db.prisma.bot.findUniqueOrThrow({ where: { id } });
    expect(row.checkedInAt?.toISOString()).toBe(h.clock.now().toISOString());
    await post(id, auth, { server_count: 21, shard_id: 1, shard_count: 2 });
    expect(await h.redis.get(key)).toBeNull();
  });

  it("when shards post at the same moment, then each sees the others and the sum is exact, one statement per post", async () => {
    const { id, auth } = await newBot();
    const queries = watchQueries(h.t.db.pool);
    try {
      const answers = await Promise.all(
        Array.from({ length: 8 }, (_, shard) =>
          post(id, auth, { server_count: shard + 1, shard_id: shard, shard_count: 8 }),
        ),
      );
      expect(answers.map((a) => a.status)).toEqual(Array(8).fill(200));
      // The token's first request of the minute is authenticated by its own batched lookup
      // ("api.auth", before the limiter opens its window); the write itself is one statement.
      expect(queries.names.filter((n) => n !== "api.stats" && n !== "api.auth")).toEqual([]);
      expect(queries.names.filter((n) => n === "api.stats").length).toBeLessThanOrEqual(8);
    } finally {
      queries.restore();
    }
    expect(await stored(id)).toEqual({ total: 36, shards: [1, 2, 3, 4, 5, 6, 7, 8] });
  });

  it("when a bot posts for shard 65,535, then the post writes one small row, no step of it handles thousands of rows, and the sum stays right", async () => {
    const { id, token, auth } = await newBot();
    expect((await post(id, auth, { server_count: 5, shard_id: 0, shard_count: 65_536 })).status).toBe(200);
    expect((await post(id, auth, { server_count: 6, shard_id: 1, shard_count: 65_536 })).status).toBe(200);

    // The post itself, its plans taken with the rows each step produced (then rolled back).
    const input = {
      tokenHash: hashToken(token),
      botId: id,
      serverCount: 7,
      shard: { id: 65_535, count: 65_536 },
      now: h.clock.now(),
    };
    const plans = await nestedPlans(
      h.t.db.pool,
      async (client) =>
        expect(await writeStats({ ...h.t.db, pool: client as never }, [input])).toHaveLength(1),
      { analyze: true },
    );
    const rows = plans
      .flatMap((plan) => planNodes(plan.Plan))
      .map((n) => (n["Actual Rows"] ?? 0) * (n["Actual Loops"] ?? 1));
    // The lock, the foreign-key check and the write were seen; none of their steps produced more
    // than a few rows (a scan of this small table may take all of it): an array of every shard up
    // to 65,535 took 65,536 rows, 0.2–0.7 s.
    expect(plans.length).toBeGreaterThanOrEqual(2);
    expect(Math.max(...rows)).toBeLessThan(1_000);

    expect((await post(id, auth, { server_count: 7, shard_id: 65_535, shard_count: 65_536 })).status).toBe(
      200,
    );
    const { rows: sizes } = await h.t.db.pool.query<{ bot: number; shards: number; largest: number }>(
      `SELECT pg_column_size(b.*) AS bot,
              (SELECT count(*)::int FROM bot_shard_counts s WHERE s.bot_id = b.id) AS shards,
              (SELECT max(pg_column_size(s.*)) FROM bot_shard_counts s WHERE s.bot_id = b.id) AS largest
         FROM bots b WHERE b.id = $1`,
      [id],
    );
    expect(sizes[0]).toEqual({ bot: expect.any(Number), shards: 3, largest: expect.any(Number) });
    expect(sizes[0]!.bot).toBeLessThan(1_024);
    expect(sizes[0]!.largest).toBeLessThan(64);
    expect((await stored(id)).total).toBe(18);

    // A smaller layout drops the highest shard from the sum, as before.
    expect((await post(id, auth, { server_count: 8, shard_id: 0, shard_count: 2 })).status).toBe(200);
    expect(await stored(id)).toEqual({ total: 14, shards: [8, 6] });
  });
});
