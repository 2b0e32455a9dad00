/**
 * Refusals cost nothing: an unknown token opens no rate window in Redis, a rate-limited request
 * runs no query beyond authentication, and a write's body is not read before its token is known.
 */

import { randomBytes, randomUUID } from "node:crypto";
import { connect } from "node:net";
import { type SeededBot, seedBot, useForFile, watchQueries } from "@botdir/db/testing";
import type { Redis } from "ioredis";
import request from "supertest";
import { createTokenSet, type TokenSet } from "../src/services/token-set.js";
import { checkVote, cmd, deadRedis, listen, USER, useHarness } from "./support.js";

const { h } = useHarness();

const randomToken = () => randomBytes(32).toString("base64url");

/**
 * Sends only the headers of a request announcing `length` body bytes to the server on `port`;
 * resolves with the raw answer. An answer proves the server decided without the body: none was sent.
 */
function headersOnly(
  port: number,
  request: { method?: string; path: string; token: string; length: number },
  waitMs = 5_000,
): Promise<{ answer: string; ms: number }> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const socket = connect(port, "127.0.0.1");
    let answer = "";
    socket.on("data", (chunk) => {
      answer += chunk.toString();
      if (answer.includes("\r\n\r\n") && answer.includes("}")) {
        socket.destroy();
        resolve({ answer, ms: Date.now() - started });
      }
    });
    socket.on("error", reject);
    socket.setTimeout(waitMs, () => {
      socket.destroy();
      reject(new Error(`no answer; got ${JSON.stringify(answer)}`));
    });
    socket.write(
      `${request.method ?? "PUT"} ${request.path} HTTP/1.1\r\nHost: x\r\nAuthorization: ${request.token}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${request.length}\r\n\r\n`,
    );
  });
}

/**
 * Asserts the server on `port` waits for the body of `bot`'s PUT /commands: its headers alone get
 * no answer within 1 s.
 */
async function expectBodyAwaited(port: number, bot: SeededBot): Promise<void> {
  await expect(
    headersOnly(
      port,
      { path: `/api/v1/bots/${bot.id}/commands`, token: bot.token as string, length: 100 },
      1_000,
    ),
  ).rejects.toThrow(/no answer/);
}

const keysOf = (prefix: string) => h.redis.keys(`${prefix}*`);

/**
 * Sends the headers of a write with a random token to a seeded bot and declares `length` body
 * bytes without sending one; expects the 401 with `Connection: <connection>`. Returns the names
 * of the statements the pool ran meanwhile.
 */
async function expectRefusedUnread(
  port: number,
  method: string,
  last: string,
  length: number,
  connection: string,
): Promise<string[]> {
  const bot = await seedBot(h.t.db);
  const watch = watchQueries(h.t.db.pool);
  let answer: string;
  try {
    ({ answer } = await headersOnly(port, {
      method,
      path: `/api/v1/bots/${bot.id}/${last}`,
      token: randomToken(),
      length,
    }));
  } finally {
    watch.restore();
  }
  expect(answer).toMatch(/^HTTP\/1\.1 401 /);
  expect(answer).toContain(`\r\nConnection: ${connection}\r\n`);
  expect(answer).toContain('{"error":"Invalid token."}');
  return watch.names;
}

describe("unknown tokens", () => {
  it("when 200 random tokens hit the four endpoints, then every answer is 401 and no Redis key is created", async () => {
    const app = h.app();
    const bot = await seedBot(h.t.db);
    const sends = Array.from({ length: 200 }, (_, i) => {
      const auth = { Authorization: randomToken() };
      switch (i % 4) {
        case 0:
          return request(app).get(`/api/v1/bots/${bot.id}/check`).query({ userId: USER }).set(auth);
        case 1:
          return request(app).get(`/api/v1/bots/${bot.id}/votes`).set(auth);
        case 2:
          return request(app).post(`/api/v1/bots/${bot.id}/stats`).set(auth).send({ server_count: 1 });
        default:
          return request(app)
            .put(`/api/v1/bots/${bot.id}/commands`)
            .set(auth)
            .send({ commands: [cmd("a")] });
      }
    });
    const answers = await Promise.all(sends);
    expect(answers.map((r) => r.status)).toEqual(answers.map(() => 401));
    expect(await keysOf(h.prefix)).toEqual([]);
  });

  it("when random tokens read or redeliver webhook deliveries, then every answer is 401 and no Redis key is created", async () => {
    const app = h.app();
    const bot = await seedBot(h.t.db);
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) => {
        const auth = { Authorization: randomToken() };
        return i % 2 === 0
          ? request(app).get(`/api/v1/bots/${bot.id}/webhook/deliveries`).set(auth)
          : request(app)
              .post(`/api/v1/bots/${bot.id}/webhook/deliveries/${randomUUID()}/redeliver`)
              .set(auth);
      }),
    );
    expect(answers.map((r) => r.status)).toEqual(answers.map(() => 401));
    expect(await keysOf(h.prefix)).toEqual([]);
  });

  it("when a known token makes its first request of the minute, then it is counted (the window opens after authentication)", async () => {
    const app = h.app();
    const bot = await seedBot(h.t.db);
    const res = await checkVote(app, bot);
    expect(res.status).toBe(200);
    expect(res.headers["ratelimit-remaining"]).toBe(String(Number(res.headers["ratelimit-limit"]) - 1));
    expect((await keysOf(h.prefix)).filter((k) => k.includes(":rl:check:"))).toHaveLength(1);
  });
});

describe("rate-limited requests", () => {
  it.each([
    ["check", (id: string) => `/api/v1/bots/${id}/check?userId=${USER}`, "api.check"],
    ["votes", (id: string) => `/api/v1/bots/${id}/votes`, "api.votes"],
  ])(
    "when %s is over its limit, then the 429 costs one token lookup and no other query",
    async (endpoint, path, statement) => {
      const app = h.app({ limits: { [endpoint]: 1 } });
      const bot = await seedBot(h.t.db);
      const auth = { Authorization: bot.token as string };
      expect((await request(app).get(path(bot.id)).set(auth)).status).toBe(200);
      const watch = watchQueries(h.t.db.pool);
      try {
        const limited = await request(app).get(path(bot.id)).set(auth);
        expect(limited.status).toBe(429);
        expect(watch.names).toEqual(["api.auth"]);
        expect(watch.names).not.toContain(statement);
      } finally {
        watch.restore();
      }
    },
  );

  it("when a limited token sends another bot's id, then 404 still comes before 429, without reading the body", async () => {
    const app = h.app({ limits: { stats: 1 } });
    const bot = await seedBot(h.t.db);
    const other = await seedBot(h.t.db);
    const auth = { Authorization: bot.token as string };
    const postStats = (id: string) => request(app).post(`/api/v1/bots/${id}/stats`).set(auth);
    expect((await postStats(bot.id).send({ server_count: 1 })).status).toBe(200);
    const postUnreadable = (id: string) =>
      postStats(id).set("Content-Type", "application/json").send("{not json");
    expect((await postUnreadable(other.id)).status).toBe(404);
    expect((await postUnreadable(bot.id)).status).toBe(429);
  });
});

describe("bodies of refused writes when the limiter cannot answer and the token set is not fresh", () => {
  let tokens: TokenSet;
  let redis: Redis;
  let server: { port: number; close(): Promise<void> };

  beforeAll(async () => {
    // The limiter's Redis is down (it counts locally at once) and the token set cannot connect, so it
    // is never fresh: neither can refuse the token.
    redis = deadRedis();
    tokens = createTokenSet({
      connect: () => Promise.reject(new Error("connection refused")),
      logger: h.logger,
      reconnectDelayMs: 50,
    });
    tokens.start();
    server = await listen(h.app({ redis, tokens, limiterTimeoutMs: undefined }));
  });

  afterAll(async () => {
    await server.close();
    await tokens.stop();
    redis.disconnect();
  });

  it.each([
    // Above 64 kB an unread body is not drained: the connection is closed.
    ["a 1 MB PUT /commands", "PUT", "commands", 1_000_000, "close"],
    ["a 16 kB POST /stats", "POST", "stats", 16_000, "keep-alive"],
  ])(
    "when %s carries an unknown token, then 401 arrives before a body byte is sent, and only the token lookup reached PostgreSQL",
    async (_, method, last, length, connection) => {
      expect(tokens.isFresh()).toBe(false);
      const statements = await expectRefusedUnread(server.port, method, last, length, connection);
      expect(statements).toEqual(["api.auth"]);
    },
  );

  it("when the token is valid, then the write still goes through (the limiter counts it locally), its body read after the lookup", async () => {
    const bot = await seedBot(h.t.db);
    await expectBodyAwaited(server.port, bot);
    const res = await request(h.app({ redis, tokens, limiterTimeoutMs: undefined }))
      .put(`/api/v1/bots/${bot.id}/commands`)
      .set("Authorization", bot.token as string)
      .send({ commands: [cmd("ping")] });
    expect(res.status).toBe(200);
    expect(res.headers["ratelimit-remaining"]).toBe("9");
  });
});

describe("bodies of refused writes", () => {
  const server = useForFile(
    "the listener",
    () => listen(h.app()),
    (listener) => listener.close(),
  );

  it("when a 1 MB PUT /commands carries an unknown token, then 401 arrives before a body byte is sent, and the connection is closed", async () => {
    const bot = await seedBot(h.t.db);
    const { answer } = await headersOnly(server.port, {
      path: `/api/v1/bots/${bot.id}/commands`,
      token: randomToken(),
      length: 1_000_000,
    });
    expect(answer).toMatch(/^HTTP\/1\.1 401 /);
    expect(answer).toMatch(/\r\nConnection: close\r\n/i);
    expect(answer).toContain('{"error":"Invalid token."}');
  });

  it("when the token is valid, then the server waits for the body (it is read only after admission)", async () => {
    await expectBodyAwaited(server.port, await seedBot(h.t.db));
  });
});

describe("bodies of refused writes with a fresh token set", () => {
  let tokens: TokenSet;
  let server: { port: number; close(): Promise<void> };

  beforeAll(async () => {
    tokens = createTokenSet({ connect: () => h.t.db.connectDedicated(), logger: h.logger, maxLagMs: 30_000 });
    tokens.start();
    await tokens.whenFresh();
    server = await listen(h.app({ tokens }));
  });

  afterAll(async () => {
    await server.close();
    await tokens.stop();
  });

  it.each([
    ["a 1 MB PUT /commands", "PUT", "commands", 1_000_000, "close"],
    ["a 16 kB POST /stats", "POST", "stats", 16_000, "keep-alive"],
  ])(
    "when %s carries an unknown token, then 401 arrives after the set's barrier and before a body byte is sent, with no query on the pool",
    async (_, method, last, length, connection) => {
      const statements = await expectRefusedUnread(server.port, method, last, length, connection);
      expect(statements).toEqual([]);
    },
  );

  it("when the token is valid, then the server waits for the body", async () => {
    await expectBodyAwaited(server.port, await seedBot(h.t.db));
  });
});
