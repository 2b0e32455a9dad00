import { seedBot, watchQueries } from "@botdir/db/testing";
import { VOTE_WINDOW_MS, VoteCheckResult } from "@botdir/schema";
import request from "supertest";
import { castVote, expectAnswer, listen, USER, useHarness } from "./support.js";

const { h, app } = useHarness();

async function newBot() {
  const bot = await seedBot(h.t.db);
  return { id: bot.id, auth: { Authorization: bot.token! } };
}

const check = (id: string, auth: Record<string, string>, userId: string | null = USER) =>
  request(app)
    .get(`/api/v1/bots/${id}/check`)
    .query(userId === null ? {} : { userId })
    .set(auth);

const OUTSIDE = { voted: 0, hasVoted: false, votedAt: null, nextVoteAt: null };

describe("GET /api/v1/bots/{id}/check", () => {
  it("when the user voted inside the 12-hour window, then voted 1 with votedAt and nextVoteAt = votedAt + 12 h", async () => {
    const { id, auth } = await newBot();
    const votedAt = new Date(h.clock.now().getTime() - 60 * 60 * 1000);
    await castVote(h.t, id, USER, votedAt);

    const res = await check(id, auth);
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toBe("application/json; charset=utf-8");
    expect(res.body).toEqual({
      voted: 1,
      hasVoted: true,
      votedAt: votedAt.toISOString(),
      nextVoteAt: new Date(votedAt.getTime() + VOTE_WINDOW_MS).toISOString(),
    });
    expect(Object.keys(res.body)).toEqual(["voted", "hasVoted", "votedAt", "nextVoteAt"]);
    expect(VoteCheckResult.strict().safeParse(res.body).success).toBe(true);
    expect(res.body.votedAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  });

  it("when the user never voted, then voted 0, hasVoted false and null timestamps", async () => {
    const { id, auth } = await newBot();
    expectAnswer(await check(id, auth), 200, '{"voted":0,"hasVoted":false,"votedAt":null,"nextVoteAt":null}');
  });

  it("when exactly 12 hours have passed, then the user is outside the window; 1 ms before, inside", async () => {
    const { id, auth } = await newBot();
    const votedAt = new Date("2026-11-21T00:00:00.000Z");
    await castVote(h.t, id, USER, votedAt);
    const saved = h.clock.now();
    try {
      h.clock.set(votedAt.getTime() + VOTE_WINDOW_MS - 1);
      expect((await check(id, auth)).body.voted).toBe(1);
      h.clock.set(votedAt.getTime() + VOTE_WINDOW_MS);
      expect((await check(id, auth)).body).toEqual(OUTSIDE);
    } finally {
      h.clock.set(saved);
    }
  });

  it("when the user voted for another bot, then this bot reports no vote", async () => {
    const mine = await newBot();
    const other = await newBot();
    await castVote(h.t, other.id, USER, h.clock.now());
    expect((await check(mine.id, mine.auth)).body).toEqual(OUTSIDE);
    expect((await check(other.id, other.auth)).body.voted).toBe(1);
  });

  it.each([
    [null, "userId is required."],
    ["", "userId must be a user id (17 to 20 digits)."],
    ["12345", "userId must be a user id (17 to 20 digits)."],
    ["12345678901234567a", "userId must be a user id (17 to 20 digits)."],
    ["\u0000", "userId must be a user id (17 to 20 digits)."],
  ])("when userId is %j, then 400 naming it", async (userId, error) => {
    const { id, auth } = await newBot();
    const res = await check(id, auth, userId);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error });
  });

  it("when userId is missing and the token unknown, then 401 comes before 400", async () => {
    const { id } = await newBot();
    expect((await check(id, { Authorization: "nope" }, null)).status).toBe(401);
  });

  it("when userId is missing and the id is another bot's, then 404 comes before 400", async () => {
    const mine = await newBot();
    const other = await newBot();
    expect((await check(other.id, mine.auth, null)).status).toBe(404);
  });
});

describe("GET /api/v1/bots/check (no id: the token's bot)", () => {
  it("when a top.gg-style client checks without an id, then the token's bot answers", async () => {
    const { id, auth } = await newBot();
    await castVote(h.t, id, USER, h.clock.now());
    const res = await request(app).get("/api/v1/bots/check").query({ userId: USER }).set(auth);
    expect(res.status).toBe(200);
    expect(res.body.voted).toBe(1);
  });
});

describe("the hot path", () => {
  it("costs one database query and at most one Redis command per request, with no token lookup of its own", async () => {
    const { id, auth } = await newBot();
    await castVote(h.t, id, USER, h.clock.now());
    await check(id, auth); // warm-up: the limiter script is loaded into Redis

    let redisCommands = 0;
    const queries = watchQueries(h.t.db.pool);
    const sendCommand = h.redis.sendCommand;
    h.redis.sendCommand = (...args: Parameters<typeof sendCommand>) => {
      redisCommands++;
      return sendCommand.apply(h.redis, args);
    };
    try {
      const res = await check(id, auth);
      expect(res.status).toBe(200);
      expect(res.body.voted).toBe(1);
      expect({ queries: queries.names.length, redisCommands }).toEqual({ queries: 1, redisCommands: 1 });
    } finally {
      queries.restore();
      h.redis.sendCommand = sendCommand;
    }
  });

  it("when many bots check at once, then their lookups and limiter calls share statements, and each gets its own answer", async () => {
    const bots = await Promise.all(Array.from({ length: 30 }, () => newBot()));
    await Promise.all(
      bots.filter((_, i) => i % 2 === 0).map((b) => castVote(h.t, b.id, USER, h.clock.now())),
    );
    const server = await listen(h.app({ batching: { maxInFlight: 1 } }));

    let redisCommands = 0;
    // Each statement and Redis command takes 50 ms longer, so requests pile up behind the one in
    // flight, as they do under load.
    const queries = watchQueries(h.t.db.pool, { delayMs: 50 });
    const sendCommand = h.redis.sendCommand;
    const slow = () => new Promise((resolve) => setTimeout(resolve, 50));
    h.redis.sendCommand = ((...args: Parameters<typeof sendCommand>) => {
      redisCommands++;
      void slow().then(() => sendCommand.apply(h.redis, args));
      return (args[0] as { promise: Promise<unknown> }).promise;
    }) as typeof sendCommand;
    try {
      const get = (path: string, token: string) =>
        fetch(`${server.base}${path}`, { headers: { authorization: token } }).then(async (r) => ({
          status: r.status,
          body: (await r.json()) as { voted: number },
        }));
      const [answers, unknown, foreign] = await Promise.all([
        Promise.all(bots.map((b) => get(`/api/v1/bots/${b.id}/check?userId=${USER}`, b.auth.Authorization))),
        get(`/api/v1/bots/${bots[0]!.id}/check?userId=${USER}`, "not-a-known-token"),
        get(`/api/v1/bots/${bots[1]!.id}/check?userId=${USER}`, bots[0]!.auth.Authorization),
      ]);
      answers.forEach((answer, i) => {
        expect(answer.status).toBe(200);
        expect(answer.body.voted).toBe(i % 2 === 0 ? 1 : 0);
      });
      expect(unknown.status).toBe(401);
      expect(foreign.status).toBe(404);
      // 32 requests: on average at least two per statement and per Redis call.
      expect(queries.names.length).toBeGreaterThanOrEqual(1);
      expect(queries.names.length).toBeLessThanOrEqual(16);
      expect(redisCommands).toBeGreaterThanOrEqual(1);
      expect(redisCommands).toBeLessThanOrEqual(16);
    } finally {
      queries.restore();
      h.redis.sendCommand = sendCommand;
      await server.close();
    }
  });
});
