import type { RequestListener } from "node:http";
import { createServer, type Server, type Socket } from "node:net";
import { hashToken } from "@botdir/db";
import { randomBotId, seedBot } from "@botdir/db/testing";
import { systemClock } from "@botdir/service-kit";
import { redisReady, waitFor } from "@botdir/service-kit/testing";
import { startRedisServer } from "@botdir/test-stores";
import { Redis } from "ioredis";
import request from "supertest";
import { createRateLimiter, type NewWindow } from "../src/services/ratelimit.js";
import {
  CapturingLogger,
  checkVote,
  cmd,
  deadRedis,
  expectAnswer,
  failFastRedis,
  USER,
  useHarness,
} from "./support.js";

const { h } = useHarness();

async function newBot() {
  const bot = await seedBot(h.t.db);
  return { id: bot.id, token: bot.token!, auth: { Authorization: bot.token! } };
}

const putCommands = (
  app: RequestListener,
  id: string,
  auth: Record<string, string>,
  body: unknown = { commands: [cmd("a")] },
) =>
  request(app)
    .put(`/api/v1/bots/${id}/commands`)
    .set(auth)
    .send(body as object);

describe("PUT /commands: 10 per token per minute", () => {
  it("when the 11th request of the minute arrives, then 429 with retryAfter = seconds until the window resets", async () => {
    const app = h.app();
    const bot = await newBot();
    for (let i = 1; i <= 10; i++) {
      const res = await putCommands(app, bot.id, bot.auth);
      expect(res.status).toBe(200);
      expect(res.headers["ratelimit-limit"]).toBe("10");
      expect(res.headers["ratelimit-remaining"]).toBe(String(10 - i));
      expect(res.headers["ratelimit-policy"]).toBe("10;w=60");
      expect(Number(res.headers["ratelimit-reset"])).toBeGreaterThanOrEqual(1);
      expect(Number(res.headers["ratelimit-reset"])).toBeLessThanOrEqual(60);
    }

    const res = await putCommands(app, bot.id, bot.auth);
    const pttl = await h.redis.pttl(`${h.prefix}rl:commands:${hashToken(bot.token)}`);
    expect(res.status).toBe(429);
    expect(Object.keys(res.body)).toEqual(["error", "retryAfter"]);
    expect(res.body.error).toBe("Rate limit exceeded.");
    expect(Number.isInteger(res.body.retryAfter)).toBe(true);
    // The window's remaining lifetime, rounded up to whole seconds (read just after the answer).
    expect(pttl).toBeGreaterThan(0);
    expect(res.body.retryAfter).toBeGreaterThanOrEqual(Math.ceil(pttl / 1000));
    expect(res.body.retryAfter).toBeLessThanOrEqual(Math.ceil(pttl / 1000) + 1);
    expect(res.headers["retry-after"]).toBe(String(res.body.retryAfter));
    expect(res.headers["ratelimit-remaining"]).toBe("0");
    expect(res.headers["ratelimit-reset"]).toBe(String(res.body.retryAfter));

    // Refused requests change nothing.
    const stored = await h.t.db.prisma.bot.findUniqueOrThrow({ where: { id: bot.id } });
    expect(stored.commands).toEqual([cmd("a")]);
  });

  it("when a token is limited, then another token and another endpoint of the same token are not", async () => {
    const app = h.app();
    const bot = await newBot();
    const other = await newBot();
    for (let i = 0; i < 10; i++) await putCommands(app, bot.id, bot.auth);
    expect((await putCommands(app, bot.id, bot.auth)).status).toBe(429);

    expect((await putCommands(app, other.id, other.auth)).status).toBe(200);
    const stats = await request(app)
      .post(`/api/v1/bots/${bot.id}/stats`)
      .set(bot.auth)
      .send({ server_count: 1 });
    expect(stats.status).toBe(200);
    expect(stats.headers["ratelimit-limit"]).toBe("60");
  });

  it("keys on the token, not the client address", async () => {
    const app = h.app();
    const bot = await newBot();
    for (let i = 0; i < 10; i++) {
      await putCommands(app, bot.id, bot.auth).set("X-Forwarded-For", `203.0.113.${i + 1}`);
    }
    const res = await putCommands(app, bot.id, bot.auth).set("X-Forwarded-For", "198.51.100.7");
    expect(res.status).toBe(429);
  });

  it("when limited, then 401 and 404 still come first, and 429 comes before a 400", async () => {
    const app = h.app();
    const bot = await newBot();
    const other = await newBot();
    for (let i = 0; i < 10; i++) await putCommands(app, bot.id, bot.auth);

    expect((await putCommands(app, bot.id, bot.auth, { commands: "bad" })).status).toBe(429);
    expectAnswer(await putCommands(app, other.id, bot.auth), 404, '{"error":"Bot not found."}');
    expect((await putCommands(app, randomBotId(), { Authorization: "unknown" })).status).toBe(401);
  });
});

describe("the window's key in Redis", () => {
  it("when a token's window key has no expiry (not written so by the limiter), then the next counted request gives it the window and counts on from it", async () => {
    const app = h.app();
    const bot = await newBot();
    const key = `${h.prefix}rl:check:${hashToken(bot.token)}`;
    // The token's window is open (so the request is counted as an existing window), then loses
    // its expiry and holds 5.
    expect((await checkVote(app, bot)).status).toBe(200);
    await h.redis.set(key, "5");
    expect(await h.redis.pttl(key)).toBe(-1);
    const res = await checkVote(app, bot);
    expect(res.status).toBe(200);
    expect(res.headers["ratelimit-remaining"]).toBe(String(600 - 6));
    expect(res.headers["ratelimit-reset"]).toBe("60");
    const pttl = await h.redis.pttl(key);
    expect(pttl).toBeGreaterThan(55_000);
    expect(pttl).toBeLessThanOrEqual(60_000);
  });

  it("when a window is counted, then its reset is the key's remaining lifetime, not a new window", async () => {
    const app = h.app();
    const bot = await newBot();
    const key = `${h.prefix}rl:check:${hashToken(bot.token)}`;
    expect((await checkVote(app, bot)).status).toBe(200);
    await h.redis.pexpire(key, 20_000);
    const res = await checkVote(app, bot);
    expect(res.headers["ratelimit-remaining"]).toBe(String(600 - 2));
    expect(Number(res.headers["ratelimit-reset"])).toBeGreaterThanOrEqual(19);
    expect(Number(res.headers["ratelimit-reset"])).toBeLessThanOrEqual(20);
    expect(await h.redis.pttl(key)).toBeLessThanOrEqual(20_000);
  });
});

describe("the other endpoints' limits", () => {
  it("advertise the spec's per-minute limits: stats 60, check 600, votes 60", async () => {
    const app = h.app();
    const bot = await newBot();
    const stats = await request(app)
      .post(`/api/v1/bots/${bot.id}/stats`)
      .set(bot.auth)
      .send({ server_count: 1 });
    const check = await checkVote(app, bot);
    const votes = await request(app).get(`/api/v1/bots/${bot.id}/votes`).set(bot.auth);
    expect([stats.headers["ratelimit-limit"], stats.headers["ratelimit-policy"]]).toEqual(["60", "60;w=60"]);
    expect([check.headers["ratelimit-limit"], check.headers["ratelimit-policy"]]).toEqual([
      "600",
      "600;w=60",
    ]);
    expect([votes.headers["ratelimit-limit"], votes.headers["ratelimit-policy"]]).toEqual(["60", "60;w=60"]);
    expect(check.headers["ratelimit-remaining"]).toBe("599");
  });

  it.each([
    [
      "stats",
      (a: RequestListener, id: string, auth: Record<string, string>) =>
        request(a).post(`/api/v1/bots/${id}/stats`).set(auth).send({ server_count: 1 }),
    ],
    [
      "check",
      (a: RequestListener, id: string, auth: Record<string, string>) =>
        request(a).get(`/api/v1/bots/${id}/check`).query({ userId: USER }).set(auth),
    ],
    [
      "votes",
      (a: RequestListener, id: string, auth: Record<string, string>) =>
        request(a).get(`/api/v1/bots/${id}/votes`).set(auth),
    ],
  ])("when %s's limit is used up, then 429 with retryAfter and Retry-After", async (endpoint, send) => {
    const app = h.app({ limits: { [endpoint]: 3 } });
    const bot = await newBot();
    for (let i = 0; i < 3; i++) expect((await send(app, bot.id, bot.auth)).status).toBe(200);
    const res = await send(app, bot.id, bot.auth);
    expect(res.status).toBe(429);
    expect(res.body).toEqual({ error: "Rate limit exceeded.", retryAfter: expect.any(Number) });
    expect(res.headers["retry-after"]).toBe(String(res.body.retryAfter));
  });
});

describe("while Redis fails: this replica's share, counted locally; fail-open as the last resort", () => {
  /**
   * A write and a read are counted by the process itself against its share (`limit` in the
   * headers), a bad token is still refused; returns the write's answer.
   */
  async function expectServedLocally(
    app: Parameters<typeof putCommands>[0],
    bot: Awaited<ReturnType<typeof newBot>>,
  ) {
    const write = await putCommands(app, bot.id, bot.auth);
    expect(write.status).toBe(200);
    expect(write.headers["ratelimit-remaining"]).toBeDefined();
    const check = await checkVote(app, bot);
    expect(check.status).toBe(200);
    expect((await putCommands(app, bot.id, { Authorization: "not-a-token" })).status).toBe(401);
    return write;
  }

  it("when Redis is unreachable, then each replica counts its share of the limit in memory, tokens are still checked, and the event is logged without the token", async () => {
    const redis = deadRedis();
    // Two replicas: each allows ceil(10 / 2) = 5 commands a minute meanwhile.
    const app = h.app({ redis, limiterTimeoutMs: undefined, limiterLocalShare: 0.5 });
    const bot = await newBot();
    const before = h.logger.events("rate_limit_local_fallback").length;

    const first = await expectServedLocally(app, bot);
    expect(first.headers["ratelimit-limit"]).toBe("5");
    expect(first.headers["ratelimit-remaining"]).toBe("4");
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) statuses.push((await putCommands(app, bot.id, bot.auth)).status);
    expect(statuses).toEqual([200, 200, 200, 200, 429]);
    expect((await putCommands(app, randomBotId(), bot.auth)).status).toBe(404);
    const events = h.logger.events("rate_limit_local_fallback").slice(before);
    expect(events.length).toBeGreaterThanOrEqual(1);
    expect(JSON.stringify(events)).not.toContain(bot.token);
    expect(JSON.stringify(events)).not.toContain(hashToken(bot.token));
    expect(h.logger.events("rate_limit_fail_open")).toEqual([]);
    redis.disconnect();
  });

  it("when the process cannot count either (its table of local windows is full), then the request fails open and that is logged", async () => {
    const redis = deadRedis();
    const logger = new CapturingLogger();
    const limiter = createRateLimiter({
      redis,
      prefix: h.prefix,
      logger,
      clock: systemClock,
      localWindowsMax: 1,
    });
    try {
      expect(await limiter.consume("check", "a".repeat(64))).toMatchObject({ kind: "allowed", local: true });
      expect(await limiter.consume("check", "b".repeat(64))).toEqual({ kind: "unknown", limit: 600 });
      expect(await limiter.consume("check", "a".repeat(64))).toMatchObject({
        kind: "allowed",
        remaining: 598,
      });
      // A token PostgreSQL has not confirmed opens no local window; once confirmed, it is counted
      // locally, and here the table is full.
      const unconfirmed = await limiter.consumeExisting("votes", "c".repeat(64));
      expect(unconfirmed).toEqual({ kind: "new", limit: 60, countLocally: true });
      expect(logger.events("rate_limit_fail_open")).toHaveLength(1);
      expect(await limiter.consume("votes", "c".repeat(64), unconfirmed as NewWindow)).toEqual({
        kind: "unknown",
        limit: 60,
      });
      expect(logger.events("rate_limit_fail_open")).toHaveLength(2);
      expect(logger.events("rate_limit_local_fallback")).toHaveLength(1);
    } finally {
      redis.disconnect();
    }
  });

  it("when the Redis server stops under a connected client, then the API keeps serving, counts locally and still refuses bad tokens", async () => {
    const server = await startRedisServer();
    const redis = await failFastRedis(server.url);
    // Generous: a token's first request of the minute takes two Redis round trips (the window is
    // opened only after authentication), and a loaded CI machine must not time it out by accident.
    // Once the server is stopped the client refuses commands at once (no offline queue).
    const app = h.app({ redis, limiterTimeoutMs: 1_000 });
    const bot = await newBot();
    try {
      const before = await putCommands(app, bot.id, bot.auth);
      expect(before.status).toBe(200);
      expect(before.headers["ratelimit-remaining"]).toBe("9");

      await server.stop();
      // The local count starts on its own: Redis's count is not known to the process.
      const local = await expectServedLocally(app, bot);
      expect(local.headers["ratelimit-remaining"]).toBe("9");
    } finally {
      redis.disconnect();
      await server.stop();
    }
  });

  it("when Redis executes a count after the limiter gave up on it, then that request is counted once in the shared window: once confirmed, it is decided from that late count if it comes within another deadline, else counted locally, and it opens Redis's window only if that count found none", async () => {
    const server = await startRedisServer();
    const redis = await failFastRedis(server.url);
    const pauser = await failFastRedis(server.url);
    const app = h.app({ redis, limiterTimeoutMs: 100 });
    const bot = await newBot();
    const key = `${h.prefix}rl:commands:${hashToken(bot.token)}`;
    const before = h.logger.events("rate_limit_local_fallback").length;
    try {
      const opened = await putCommands(app, bot.id, bot.auth);
      expect(opened.status).toBe(200);
      expect(await pauser.get(key)).toBe("1");

      // Redis holds every client's commands for a second, then executes them: the limiter's
      // calls time out first, and the count of the window's existing key lands late.
      await pauser.call("CLIENT", "PAUSE", "1000", "ALL");
      const late = await putCommands(app, bot.id, bot.auth);
      expect(late.status).toBe(200);
      // Counted by this process (its own window: the first it counts), as the fallback does.
      expect(late.headers["ratelimit-remaining"]).toBe("9");
      const events = h.logger.events("rate_limit_local_fallback").slice(before) as { reason: string }[];
      expect(events.map((e) => e.reason)).toContain("timeout");

      // Once the pause is over: the late count, and the next request counts on from it.
      await waitFor(async () => (await pauser.get(key)) === "2", "the late count in Redis");
      const next = await putCommands(app, bot.id, bot.auth);
      expect(next.headers["ratelimit-remaining"]).toBe("7");

      // A token's first request of the minute: the late call finds no window and writes nothing;
      // once its reply says so, the request opens Redis's window.
      const fresh = await newBot();
      const freshKey = `${h.prefix}rl:commands:${hashToken(fresh.token)}`;
      await pauser.call("CLIENT", "PAUSE", "1000", "ALL");
      const first = await putCommands(app, fresh.id, fresh.auth);
      expect(first.status).toBe(200);
      expect(first.headers["ratelimit-remaining"]).toBe("9");
      await waitFor(
        async () => (await pauser.get(freshKey)) === "1",
        "the window opened after the late reply",
      );
      expect(await pauser.pttl(freshKey)).toBeGreaterThan(0);
      const second = await putCommands(app, fresh.id, fresh.auth);
      expect(second.headers["ratelimit-remaining"]).toBe("8");

      // A call late by less than a deadline more: its reply is in by the time the token is
      // confirmed, and the request is decided from Redis's count, the second of the window.
      const briefly = h.app({ redis, limiterTimeoutMs: 300 });
      const third = await newBot();
      const thirdKey = `${h.prefix}rl:commands:${hashToken(third.token)}`;
      expect((await putCommands(briefly, third.id, third.auth)).status).toBe(200);
      await pauser.call("CLIENT", "PAUSE", "450", "ALL");
      const decided = await putCommands(briefly, third.id, third.auth);
      expect(decided.status).toBe(200);
      expect(decided.headers["ratelimit-remaining"]).toBe("8");
      expect(await pauser.get(thirdKey)).toBe("2");
    } finally {
      redis.disconnect();
      pauser.disconnect();
      await server.stop();
    }
  });

  it("when Redis accepts the connection but never answers, then the limiter gives up after its timeout and counts the request locally", async () => {
    const sockets: Socket[] = [];
    const blackhole: Server = createServer((socket) => {
      sockets.push(socket);
      socket.on("data", () => {}); // read and never reply
    });
    await new Promise<void>((resolve) => blackhole.listen(0, "127.0.0.1", resolve));
    const { port } = blackhole.address() as { port: number };
    // No ready check and no handshake commands, so the client is ready as soon as TCP connects.
    const redis = new Redis({
      host: "127.0.0.1",
      port,
      enableReadyCheck: false,
      disableClientInfo: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
    });
    redis.on("error", () => {});
    await redisReady(redis);
    const logger = h.logger;
    const before = logger.events("rate_limit_local_fallback").length;
    const app = h.app({ redis, limiterTimeoutMs: undefined });
    const bot = await newBot();
    try {
      const res = await checkVote(app, bot);
      expect(res.status).toBe(200);
      expect(res.body.voted).toBe(0);
      expect(res.headers["ratelimit-remaining"]).toBe("599");
      const events = logger.events("rate_limit_local_fallback").slice(before) as { reason: string }[];
      expect(events.map((e) => e.reason)).toContain("timeout");
    } finally {
      redis.disconnect();
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => blackhole.close(resolve));
    }
  });
});
