/**
 * The in-process token set (LISTEN/NOTIFY) and the over-limit note: an unknown token, and a token
 * already over its limit, are refused with no PostgreSQL query and no Redis command; revocation
 * stays exact; a broken listener falls back to the database path.
 */
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { generateToken, hashToken } from "@botdir/db";
import { seedBot, watchQueries } from "@botdir/db/testing";
import type { Redis } from "ioredis";
import request from "supertest";
import {
  createTokenSet,
  type ListenConnection,
  TOKEN_CHANNEL,
  type TokenLookup,
  type TokenSet,
  type TokenSetOptions,
} from "../src/services/token-set.js";
import { type Harness, USER, useHarness } from "./support.js";

const { h } = useHarness();
const sets: TokenSet[] = [];

// Each set holds a connection of its own for LISTEN: close it after every test.
afterEach(async () => {
  for (const set of sets.splice(0)) await set.stop();
});

const randomToken = () => randomBytes(32).toString("base64url");

function tokenSet(
  options: Partial<
    Pick<TokenSetOptions, "connect" | "maxLagMs" | "pingIntervalMs" | "barrierIntervalMs">
  > = {},
): TokenSet {
  const set = createTokenSet({
    connect: () => h.t.db.connectDedicated(),
    logger: h.logger,
    reconnectDelayMs: 50,
    // A loaded machine can hold a ping back for seconds; only the tests that kill the connection
    // or stall the barrier mean the set to lose its trust.
    maxLagMs: 30_000,
    ...options,
  });
  sets.push(set);
  set.start();
  return set;
}

type Notification = { channel: string; payload?: string };

/**
 * The set's connection with its notifications in the test's hands, as if they were late: from
 * `hold(filter)` on, every notification the filter matches is kept back (in order) until
 * `release`; the others reach the set at once. The pg_notify statements the set sends (its pings
 * and barriers) are recorded.
 */
function delayedNotifications() {
  let filter: ((payload: string) => boolean) | null = null;
  const held: { payload: string; deliver(): void }[] = [];
  const sent: { payload: string; at: number }[] = [];
  const received: string[] = [];
  return {
    async connect(): Promise<ListenConnection> {
      const conn = await h.t.db.connectDedicated();
      return {
        query(text, values) {
          if (text.includes("pg_notify")) sent.push({ payload: String(values?.[1]), at: performance.now() });
          return conn.query(text, values);
        },
        on(event: "notification" | "error" | "end", listener: (arg: never) => void) {
          if (event !== "notification") return conn.on(event, listener as (error?: Error) => void);
          const deliver = listener as (message: Notification) => void;
          return conn.on("notification", (message) => {
            const payload = message.payload ?? "";
            received.push(payload);
            if (filter?.(payload)) held.push({ payload, deliver: () => deliver(message) });
            else deliver(message);
          });
        },
        release: (destroy) => conn.release(destroy),
      };
    },
    hold(matching: (payload: string) => boolean = () => true) {
      filter = matching;
    },
    /**
     * Delivers the held notifications in order, up to and including the first `upTo` matches (all
     * by default); holding goes on only after a partial release.
     */
    release(upTo?: (payload: string) => boolean) {
      if (upTo === undefined) filter = null;
      while (held.length > 0) {
        const next = held.shift() as (typeof held)[number];
        next.deliver();
        if (upTo?.(next.payload)) return;
      }
    },
    held: () => held.map((n) => n.payload),
    received: () => received,
    /** The barriers the set sent, oldest first. */
    barriers: () => sent.filter((n) => n.payload.startsWith("barrier-")),
    sentPayloads: () => sent.map((n) => n.payload),
  };
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

/** An unknown token for `botId` is refused with 401 after a look-up in PostgreSQL. */
async function expectUnknownTokenAskedOfPostgres(app: Parameters<typeof check>[0], botId: string) {
  const queries = watchQueries(h.t.db.pool);
  try {
    expect((await check(app, botId, randomToken())).status).toBe(401);
    expect(queries.names.length).toBeGreaterThan(0);
  } finally {
    queries.restore();
  }
}

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
    expect(tokens.lookup(hashToken(bot.token as string))).toBe("missing");
    expect(tokens.lookup(hashToken(next))).toBe("present");
  });

  it("when a bot is un-approved, then its token leaves the set", async () => {
    const bot = await seedBot(h.t.db);
    const tokens = tokenSet();
    await tokens.whenFresh();
    const hash = hashToken(bot.token as string);
    expect(tokens.lookup(hash)).toBe("present");
    await h.t.db.pool.query("UPDATE bots SET status = 'pending' WHERE id = $1", [bot.id]);
    await until(() => tokens.lookup(hash) === "missing");
    await h.t.db.pool.query("UPDATE bots SET status = 'approved' WHERE id = $1", [bot.id]);
    await until(() => tokens.lookup(hash) === "present");
  });
});

describe("a token committed just before its first request (the barrier)", () => {
  const isBarrier = (payload: string) => payload.startsWith("barrier-");

  it("when a new token's NOTIFY has not reached the set when its first requests arrive, then they wait for a barrier behind it and are served (a write's body read after it), not refused", async () => {
    const link = delayedNotifications();
    const tokens = tokenSet({ connect: link.connect });
    await tokens.whenFresh();
    const app = h.app({ tokens });
    link.hold();
    const bot = await seedBot(h.t.db);
    const token = bot.token as string;
    const hash = hashToken(token);
    // PostgreSQL has sent the token's NOTIFY; the set has not seen it.
    await until(() => link.held().includes(`:${hash}`));
    expect(tokens.lookup(hash)).toBe("missing");

    // The canonical path is decided before Express (early refusals), the trailing-slash spelling
    // by the route's limitFirst: both wait for the barrier.
    const early = check(app, bot.id, token).then((res) => res.status);
    const routed = request(app)
      .get(`/api/v1/bots/${bot.id}/check/`)
      .query({ userId: USER })
      .set({ Authorization: token })
      .then((res) => res.status);
    // A write's body is read once the barrier has let the token through.
    const write = request(app)
      .post(`/api/v1/bots/${bot.id}/stats`)
      .set({ Authorization: token })
      .send({ server_count: 7 })
      .then((res) => res.status);
    // The barrier went out after the commit, so it comes back behind the token's NOTIFY.
    await until(() => link.held().some(isBarrier));
    expect(link.held().indexOf(`:${hash}`)).toBeLessThan(link.held().findIndex(isBarrier));
    link.release();
    expect(await early).toBe(200);
    expect(await routed).toBe(200);
    expect(await write).toBe(200);
    const { rows } = await h.t.db.pool.query("SELECT server_count FROM bots WHERE id = $1", [bot.id]);
    expect(rows[0]?.server_count).toBe(7);
    expect(tokens.lookup(hash)).toBe("present");
  });

  it("when a lookup arrives while a barrier is in flight, then it waits for the next barrier, sent after it arrived", async () => {
    const link = delayedNotifications();
    const tokens = tokenSet({ connect: link.connect });
    await tokens.whenFresh();
    link.hold();
    const first = tokens.confirmAbsent(hashToken(randomToken()));
    await until(() => link.held().some(isBarrier));
    const firstBarrier = link.barriers()[0]?.payload;
    // Committed after the first barrier: its NOTIFY is behind it.
    const bot = await seedBot(h.t.db);
    const hash = hashToken(bot.token as string);
    await until(() => link.held().includes(`:${hash}`));
    let secondAnswer: TokenLookup | undefined;
    const second = tokens.confirmAbsent(hash).then((answer) => {
      secondAnswer = answer;
      return answer;
    });

    link.release((payload) => payload === firstBarrier);
    expect(await first).toBe("absent");
    // The first barrier was sent before the second lookup arrived: it does not answer it.
    await until(() => link.barriers().length === 2);
    expect(secondAnswer).toBeUndefined();
    link.release();
    expect(await second).toBe("present");
  });

  it("when many unknown tokens are looked up at once, then one barrier answers them all, and barriers are sent at most once per barrierIntervalMs", async () => {
    const link = delayedNotifications();
    const tokens = tokenSet({ connect: link.connect, barrierIntervalMs: 50 });
    await tokens.whenFresh();
    const bot = await seedBot(h.t.db);
    const known = hashToken(bot.token as string);
    await until(() => tokens.lookup(known) === "present");

    const answers = await Promise.all(
      Array.from({ length: 200 }, () => tokens.confirmAbsent(hashToken(randomToken()))),
    );
    expect(new Set(answers)).toEqual(new Set(["absent"]));
    expect(await tokens.confirmAbsent(known)).toBe("present");
    expect(link.barriers()).toHaveLength(1);

    // One lookup after another: each needs a barrier of its own, and they are spaced out.
    const before = link.barriers().length;
    const started = performance.now();
    let lookups = 0;
    while (performance.now() - started < 400) {
      expect(await tokens.confirmAbsent(hashToken(randomToken()))).toBe("absent");
      lookups++;
    }
    const sent = link.barriers().slice(before);
    expect(sent).toHaveLength(lookups);
    expect(lookups).toBeLessThanOrEqual(Math.ceil((performance.now() - started) / 50) + 1);
    for (let i = 1; i < sent.length; i++) {
      // 1 ms of slack: a timer's and performance.now()'s rounding.
      expect((sent[i]?.at ?? 0) - (sent[i - 1]?.at ?? 0)).toBeGreaterThanOrEqual(49);
    }
  });

  it("when the barrier does not come back within maxLagMs, then the answer is unknown and PostgreSQL decides (no false 401) until it is back", async () => {
    const link = delayedNotifications();
    // No ping within the test: only the barrier can time out.
    const tokens = tokenSet({ connect: link.connect, maxLagMs: 300, pingIntervalMs: 600_000 });
    await tokens.whenFresh();
    const app = h.app({ tokens });
    link.hold();
    const bot = await seedBot(h.t.db);
    const started = performance.now();
    expect(await tokens.confirmAbsent(hashToken(bot.token as string))).toBe("unknown");
    expect(performance.now() - started).toBeGreaterThanOrEqual(250);
    // Until the late barrier is back the set is not trusted: other tokens do not wait for it.
    expect(tokens.isFresh()).toBe(false);
    expect((await check(app, bot.id, bot.token as string)).status).toBe(200);
    await expectUnknownTokenAskedOfPostgres(app, bot.id);
    expect(link.barriers()).toHaveLength(1);
    link.release();
    expect(tokens.isFresh()).toBe(true);
    expect(tokens.lookup(hashToken(bot.token as string))).toBe("present");
  });

  it("when another process's barrier with the same number arrives, then it does not answer this process's lookup", async () => {
    const link = delayedNotifications();
    const tokens = tokenSet({ connect: link.connect });
    await tokens.whenFresh();
    // Only what this set sent is held: the foreign payloads reach it at once.
    link.hold((payload) => link.sentPayloads().includes(payload));
    let answer: TokenLookup | undefined;
    const pending = tokens.confirmAbsent(hashToken(randomToken())).then((a) => {
      answer = a;
      return a;
    });
    await until(() => link.held().some(isBarrier));
    const ours = link.held().find(isBarrier) as string;
    const [kind, processId, seq] = ours.split("-");
    expect([kind, processId?.length, Number(seq) > 0]).toEqual(["barrier", 16, true]);
    const foreign = [`barrier-${"0".repeat(16)}-${seq}`, `barrier-${processId}x-${seq}`, "barrier", "ping"];
    for (const payload of foreign) {
      await h.t.db.pool.query("SELECT pg_notify($1, $2)", [TOKEN_CHANNEL, payload]);
    }
    await until(() => foreign.every((payload) => link.received().includes(payload)));
    await new Promise((resolve) => setImmediate(resolve));
    expect(answer).toBeUndefined();
    link.release();
    expect(await pending).toBe("absent");
  });

  it("when this process's pings do not come back, then other processes' pings (and the plain ping of older versions) do not keep the set fresh", async () => {
    const link = delayedNotifications();
    const tokens = tokenSet({ connect: link.connect, maxLagMs: 300, pingIntervalMs: 20 });
    await tokens.whenFresh();
    link.hold((payload) => link.sentPayloads().includes(payload));
    let n = 0;
    const foreignPings = setInterval(() => {
      n++;
      for (const payload of ["ping", `ping-${"0".repeat(16)}-${n}`]) {
        h.t.db.pool.query("SELECT pg_notify($1, $2)", [TOKEN_CHANNEL, payload]).catch(() => {});
      }
    }, 20);
    try {
      await until(() => !tokens.isFresh());
      expect(link.received()).toContain("ping");
      expect(tokens.lookup(hashToken(randomToken()))).toBe("unknown");
      link.release();
      await until(() => tokens.isFresh());
    } finally {
      clearInterval(foreignPings);
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
    await expectUnknownTokenAskedOfPostgres(app, bot.id);
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
  /** A bot, a loaded token set, and the app with that set and a check limit of `check`. */
  async function overLimit(check: number) {
    const bot = await seedBot(h.t.db);
    const tokens = tokenSet();
    await tokens.whenFresh();
    return { bot, tokens, app: h.app({ tokens, limits: { check } }), token: bot.token as string };
  }

  it("when a token is over its limit, then later requests of the window get 429 with the window's retryAfter and no I/O", async () => {
    const { bot, app, token } = await overLimit(2);
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
    const { bot, tokens, app, token } = await overLimit(1);
    expect((await check(app, bot.id, token)).status).toBe(200);
    expect((await check(app, bot.id, token)).status).toBe(429);
    await h.t.db.pool.query("UPDATE bots SET token_hash = NULL WHERE id = $1", [bot.id]);
    await until(() => tokens.lookup(hashToken(token)) === "missing");
    expect((await check(app, bot.id, token)).status).toBe(401);
  });
});
