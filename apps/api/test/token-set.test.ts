/**
 * The in-process token set (LISTEN/NOTIFY) and the over-limit note: an unknown token, and a token
 * already over its limit, are refused with no PostgreSQL query and no Redis command; revocation
 * stays exact; a broken listener falls back to the database path.
 */
import { randomBytes } from "node:crypto";
import { generateToken, hashToken } from "@botdir/db";
import { seedBot, watchQueries } from "@botdir/db/testing";
import type { Redis } from "ioredis";
import request from "supertest";
import { createTokenSet, type ListenConnection, type TokenSet } from "../src/services/token-set.js";
import { type Harness, USER, useHarness } from "./support.js";

const { h } = useHarness();
const sets: TokenSet[] = [];

// Each set holds a connection of its own for LISTEN: close it after every test.
afterEach(async () => {
  for (const set of sets.splice(0)) await set.stop();
});

const randomToken = () => randomBytes(32).toString("base64url");

function tokenSet(
  options: { recentChangeMs?: number; connect?: () => Promise<ListenConnection> } = {},
): TokenSet {
  const set = createTokenSet({
    connect: options.connect ?? (() => h.t.db.connectDedicated()),
    logger: h.logger,
    recentChangeMs: options.recentChangeMs ?? 0,
    reconnectDelayMs: 50,
    // A loaded machine can hold a ping back for seconds; only the tests that kill the connection
    // mean the set to lose its trust.
    maxLagMs: 30_000,
  });
  sets.push(set);
  set.start();
  return set;
}

/** Counts the commands the app's Redis client sends (the limiter's Lua calls included). */
function countRedisCommands(redis: Redis): { count(): number; restore(): void } {
  const original = redis.sendCommand;
  let n = 0;
  redis.sendCommand = function (this: Redis, ...args: Parameters<Redis["sendCommand"]>) {
    n++;
    return original.apply(this, args);
  } as Redis["sendCommand"];
  return {
    count: () => n,
    restore: () => {
      redis.sendCommand = original;
    },
  };
}

/** Polls `condition` until it holds; the deadline is generous for a loaded machine. */
async function until(condition: () => boolean | Promise<boolean>, timeoutMs = 15_000): Promise<number> {
  const started = Date.now();
  while (!(await condition())) {
    if (Date.now() - started > timeoutMs) throw new Error("condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return Date.now() - started;
}

const check = (app: ReturnType<Harness["app"]>, id: string, token: string) =>
  request(app).get(`/api/v1/bots/${id}/check`).query({ userId: USER }).set({ Authorization: token });

describe("the set's connection", () => {
  it("when the set is loaded and listening, then it holds none of the pool's connections and gives its own back on stop", async () => {
    const checkedOut = () => h.t.db.pool.totalCount - h.t.db.pool.idleCount;
    const before = checkedOut();
    const listening = async () =>
      Number(
        (
          await h.t.db.pool.query<{ n: string }>(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND (query LIKE 'SELECT token_hash FROM bots%' OR query LIKE '%pg_notify%' OR query LIKE '%LISTEN%')",
          )
        ).rows[0]?.n,
      );
    const tokens = tokenSet();
    await tokens.whenFresh();
    expect(checkedOut()).toBe(before);
    expect(await listening()).toBe(1);
    await tokens.stop();
    await until(async () => (await listening()) === 0);
  });
});

describe("unknown tokens with a fresh token set", () => {
  it("when random tokens hit the endpoints, then 401 with no PostgreSQL query and no Redis command", async () => {
    const bot = await seedBot(h.t.db);
    const tokens = tokenSet();
    await tokens.whenFresh();
    const app = h.app({ tokens });
    const queries = watchQueries(h.t.db.pool);
    const commands = countRedisCommands(h.redis);
    try {
      for (let i = 0; i < 20; i++) {
        const res = await check(app, bot.id, randomToken());
        expect(res.status).toBe(401);
        expect(res.body).toEqual({ error: "Invalid token." });
      }
      const write = await request(app)
        .post(`/api/v1/bots/${bot.id}/stats`)
        .set({ Authorization: randomToken() })
        .send({ server_count: 1 });
      expect(write.status).toBe(401);
      expect(queries.names).toEqual([]);
      expect(commands.count()).toBe(0);
      // A known token still takes the full path (PostgreSQL confirms it).
      expect((await check(app, bot.id, bot.token as string)).status).toBe(200);
      expect(queries.names.length).toBeGreaterThan(0);
    } finally {
      queries.restore();
      commands.restore();
    }
  });

  it("when a token is rotated by an UPDATE, then the old one is refused at once and the new one works by NOTIFY, long before the safety reload", async () => {
    const bot = await seedBot(h.t.db);
    const tokens = tokenSet();
    await tokens.whenFresh();
    const app = h.app({ tokens });
    expect((await check(app, bot.id, bot.token as string)).status).toBe(200);

    const next = generateToken();
    await h.t.db.pool.query("UPDATE bots SET token_hash = $1 WHERE id = $2", [hashToken(next), bot.id]);
    // Before the NOTIFY is applied the old hash is still in the set: PostgreSQL refuses it.
    expect((await check(app, bot.id, bot.token as string)).status).toBe(401);
    // The NOTIFY takes milliseconds; 15 s allows for a loaded machine and is still a quarter of the
    // 60 s reload (reloadIntervalMs) that would also bring the new hash in.
    const took = await until(async () => (await check(app, bot.id, next)).status === 200, 15_000);
    expect(took).toBeLessThan(15_000);
    expect(tokens.lookup(hashToken(bot.token as string))).toBe("absent");
    expect(tokens.lookup(hashToken(next))).toBe("present");
  });

  it("when a bot is un-approved, then its token leaves the set", async () => {
    const bot = await seedBot(h.t.db);
    const tokens = tokenSet();
    await tokens.whenFresh();
    const hash = hashToken(bot.token as string);
    expect(tokens.lookup(hash)).toBe("present");
    await h.t.db.pool.query("UPDATE bots SET status = 'pending' WHERE id = $1", [bot.id]);
    await until(() => tokens.lookup(hash) === "absent");
    await h.t.db.pool.query("UPDATE bots SET status = 'approved' WHERE id = $1", [bot.id]);
    await until(() => tokens.lookup(hash) === "present");
  });

  it("when a change was applied less than recentChangeMs ago, then a miss takes the database path", async () => {
    const tokens = tokenSet({ recentChangeMs: 60_000 });
    await tokens.whenFresh();
    const bot = await seedBot(h.t.db);
    await until(() => tokens.lookup(hashToken(bot.token as string)) === "present");
    expect(tokens.lookup(hashToken(randomToken()))).toBe("unknown");
    const app = h.app({ tokens });
    const queries = watchQueries(h.t.db.pool);
    try {
      expect((await check(app, bot.id, randomToken())).status).toBe(401);
      expect(queries.names.length).toBeGreaterThan(0);
    } finally {
      queries.restore();
    }
  });
});

describe("a listener that is down", () => {
  it("when the LISTEN connection cannot be opened, then tokens are looked up in PostgreSQL and answered right", async () => {
    const bot = await seedBot(h.t.db);
    let connects = 0;
    const tokens = tokenSet({
      connect: () => {
        connects++;
        return Promise.reject(new Error("connection refused"));
      },
    });
    // The set has tried, failed and tried again (reconnectDelayMs 50): a first success would
    // have made it fresh by now.
    await until(() => connects >= 2);
    expect(tokens.isFresh()).toBe(false);
    expect(tokens.lookup(hashToken(randomToken()))).toBe("unknown");
    const app = h.app({ tokens });
    expect((await check(app, bot.id, bot.token as string)).status).toBe(200);
    const queries = watchQueries(h.t.db.pool);
    try {
      expect((await check(app, bot.id, randomToken())).status).toBe(401);
      expect(queries.names.length).toBeGreaterThan(0);
    } finally {
      queries.restore();
    }
  });

  it("when the LISTEN connection is killed, then the set is not trusted until it has reconnected and reloaded", async () => {
    let pid = 0;
    const tokens = tokenSet({
      connect: async () => {
        const client = await h.t.db.pool.connect();
        pid = (await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]?.pid ?? 0;
        return client;
      },
    });
    await tokens.whenFresh();
    const killed = pid;
    await h.t.db.pool.query("SELECT pg_terminate_backend($1)", [killed]);
    await until(() => !tokens.isFresh());
    expect(tokens.lookup(hashToken(randomToken()))).toBe("unknown");
    // A token created while the listener was down is in the set after the reload.
    const bot = await seedBot(h.t.db);
    await until(() => tokens.isFresh() && pid !== killed);
    await until(() => tokens.lookup(hashToken(bot.token as string)) === "present");
    const app = h.app({ tokens });
    expect((await check(app, bot.id, bot.token as string)).status).toBe(200);
    expect((await check(app, bot.id, randomToken())).status).toBe(401);
  });
});

describe("over-limit note", () => {
  it("when a token is over its limit, then later requests of the window get 429 with the window's retryAfter and no I/O", async () => {
    const bot = await seedBot(h.t.db);
    const tokens = tokenSet();
    await tokens.whenFresh();
    const app = h.app({ tokens, limits: { check: 2 } });
    const token = bot.token as string;
    expect((await check(app, bot.id, token)).status).toBe(200);
    expect((await check(app, bot.id, token)).status).toBe(200);
    const fromRedis = await check(app, bot.id, token);
    expect(fromRedis.status).toBe(429);

    const queries = watchQueries(h.t.db.pool);
    const commands = countRedisCommands(h.redis);
    let noted: request.Response;
    try {
      noted = await check(app, bot.id, token);
      expect(queries.names).toEqual([]);
      expect(commands.count()).toBe(0);
    } finally {
      queries.restore();
      commands.restore();
    }
    expect(noted.status).toBe(429);
    const pttl = await h.redis.pttl(`${h.prefix}rl:check:${hashToken(token)}`);
    expect(noted.body.retryAfter).toBeGreaterThanOrEqual(Math.ceil(pttl / 1000));
    expect(noted.body.retryAfter).toBeLessThanOrEqual(Math.ceil(pttl / 1000) + 1);
    expect(noted.headers["retry-after"]).toBe(String(noted.body.retryAfter));
    expect(noted.headers["ratelimit-remaining"]).toBe("0");
    expect(noted.headers["ratelimit-limit"]).toBe("2");
    // Another endpoint's budget is not affected by the note.
    const votes = await request(app).get(`/api/v1/bots/${bot.id}/votes`).set({ Authorization: token });
    expect(votes.status).toBe(200);
    // The path id is still checked first: another bot's id is a 404, not a 429.
    expect((await check(app, "123456789012345678", token)).status).toBe(404);
  });

  it("when a noted token is revoked, then it is refused with 401, not 429", async () => {
    const bot = await seedBot(h.t.db);
    const tokens = tokenSet();
    await tokens.whenFresh();
    const app = h.app({ tokens, limits: { check: 1 } });
    const token = bot.token as string;
    expect((await check(app, bot.id, token)).status).toBe(200);
    expect((await check(app, bot.id, token)).status).toBe(429);
    await h.t.db.pool.query("UPDATE bots SET token_hash = NULL WHERE id = $1", [bot.id]);
    await until(() => tokens.lookup(hashToken(token)) === "absent");
    expect((await check(app, bot.id, token)).status).toBe(401);
  });
});
