import { randomUserId, seedBot } from "@botdir/db/testing";
import { VotesResponse } from "@botdir/schema";
import request from "supertest";
import { expectAnswer, useHarness } from "./support.js";

const { h, app } = useHarness({ limits: { votes: 1_000 } });

async function newBot() {
  const bot = await seedBot(h.t.db);
  return { id: bot.id, auth: { Authorization: bot.token! } };
}

/** `n` votes one minute apart, oldest first; returns them newest first. */
async function seedVotes(botId: string, n: number) {
  const start = new Date("2026-11-01T00:00:00.000Z").getTime();
  const data = Array.from({ length: n }, (_, i) => ({
    botId,
    userId: randomUserId(),
    votedAt: new Date(start + i * 60_000),
  }));
  await h.t.db.prisma.vote.createMany({ data });
  return data.reverse().map((v) => ({ user_id: v.userId, voted_at: v.votedAt.toISOString() }));
}

const votes = (id: string, auth: Record<string, string>, query: Record<string, string> = {}) =>
  request(app).get(`/api/v1/bots/${id}/votes`).query(query).set(auth);

describe("GET /api/v1/bots/{id}/votes", () => {
  it("when votes exist, then they come newest first as {user_id, voted_at} only", async () => {
    const { id, auth } = await newBot();
    const expected = await seedVotes(id, 3);
    const res = await votes(id, auth);
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toBe("application/json; charset=utf-8");
    expect(res.body).toEqual({ votes: expected });
    expect(VotesResponse.strict().safeParse(res.body).success).toBe(true);
    for (const vote of res.body.votes) expect(Object.keys(vote)).toEqual(["user_id", "voted_at"]);
  });

  it("when two votes share a timestamp, then the later-logged one comes first", async () => {
    const { id, auth } = await newBot();
    const at = new Date("2026-11-02T00:00:00.000Z");
    const first = randomUserId();
    const second = randomUserId();
    await h.t.db.prisma.vote.create({ data: { botId: id, userId: first, votedAt: at } });
    await h.t.db.prisma.vote.create({ data: { botId: id, userId: second, votedAt: at } });
    const res = await votes(id, auth);
    expect(res.body.votes.map((v: { user_id: string }) => v.user_id)).toEqual([second, first]);
  });

  it("only lists the token's bot's votes; a bot without votes gets an empty list", async () => {
    const mine = await newBot();
    const other = await newBot();
    const without = await newBot();
    const expected = await seedVotes(mine.id, 2);
    await seedVotes(other.id, 4);
    expect((await votes(mine.id, mine.auth)).body).toEqual({ votes: expected });
    expectAnswer(await votes(without.id, without.auth), 200, '{"votes":[]}');
  });

  describe("limit", () => {
    let bot: { id: string; auth: Record<string, string> };
    let all: { user_id: string; voted_at: string }[];

    beforeAll(async () => {
      bot = await newBot();
      all = await seedVotes(bot.id, 120);
    });

    it.each([
      ["omitted", undefined, 50],
      ["7", "7", 7],
      ["0 (clamped up)", "0", 1],
      ["-5 (clamped up)", "-5", 1],
      ["1000 (clamped down)", "1000", 100],
      ["100", "100", 100],
      ["abc (not a number: the default)", "abc", 50],
      ["empty (the default)", "", 50],
      ["7.9 (truncated)", "7.9", 7],
    ])("when limit is %s, then %i votes", async (_name, limit, count) => {
      const res = await votes(bot.id, bot.auth, limit === undefined ? {} : { limit });
      expect(res.status).toBe(200);
      expect(res.body.votes).toEqual(all.slice(0, count));
    });
  });
});

describe("GET /api/v1/bots/votes (no id: the token's bot)", () => {
  it("when a top.gg-style client lists votes without an id, then the token's bot answers", async () => {
    const { id, auth } = await newBot();
    const expected = await seedVotes(id, 2);
    const res = await request(app).get("/api/v1/bots/votes").set(auth);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ votes: expected });
  });
});
