import { hashToken } from "@botdir/db";
import { seedBot, watchQueries } from "@botdir/db/testing";
import { StatsResponse } from "@botdir/schema";
import { waitFor } from "@botdir/service-kit/testing";
import request from "supertest";
import { expectAnswer, listen, refuseBotUpdates, useHarness } from "./support.js";

const { h, app } = useHarness({ limits: { stats: 1_000 } });

async function newBot(serverCount?: number) {
  const bot = await seedBot(h.t.db, serverCount === undefined ? {} : { serverCount });
  return { id: bot.id, auth: { Authorization: bot.token! } };
}

const post = (id: string, auth: Record<string, string>) =>
  request(app).post(`/api/v1/bots/${id}/stats`).set(auth);
const row = (id: string) => h.t.db.prisma.bot.findUniqueOrThrow({ where: { id } });

describe("POST /api/v1/bots/{id}/stats", () => {
  it("when server_count is posted, then 200 {success, server_count} as exact JSON and the count is stored", async () => {
    const { id, auth } = await newBot();
    const res = await post(id, auth).send({ server_count: 1482 });
    expectAnswer(res, 200, '{"success":true,"server_count":1482}');
    expect(StatsResponse.strict().safeParse(res.body).success).toBe(true);
    const stored = await row(id);
    expect(stored.serverCount).toBe(1482n);
    expect(stored.checkedInAt?.toISOString()).toBe(h.clock.now().toISOString());
  });

  it.each([
    [{ guilds: 12 }, 12],
    [{ guildCount: 7 }, 7],
    [{ guildCount: 7, server_count: 9 }, 9],
    [{ server_count: 0 }, 0],
    [{ server_count: [100, 250] }, 350],
    [{ shards: [10, 20], shard_id: 0, shard_count: 2, server_count: 0 }, 30],
    [{ guilds: 5, shards: 2 }, 5],
    [{ server_count: Number.MAX_SAFE_INTEGER }, Number.MAX_SAFE_INTEGER],
  ])("when the body is %j, then the stored count is %d", async (body, expected) => {
    const { id, auth } = await newBot();
    const res = await post(id, auth).send(body);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ success: true, server_count: expected });
    expect((await row(id)).serverCount).toBe(BigInt(expected));
  });

  it("when the same count is posted again, then the check-in time is still written", async () => {
    const { id, auth } = await newBot(50);
    await post(id, auth).send({ server_count: 50 });
    h.clock.advance(60_000);
    const res = await post(id, auth).send({ server_count: 50 });
    expect(res.status).toBe(200);
    expect((await row(id)).checkedInAt?.toISOString()).toBe(h.clock.now().toISOString());
  });

  it("when the count is unchanged, then the page cache is kept; when it changes, then it is deleted", async () => {
    const { id, auth } = await newBot(50);
    const key = `${h.prefix}page:bot:${id}`;
    await h.redis.set(key, "<rendered page>");

    await post(id, auth).send({ server_count: 50 });
    expect(await h.redis.get(key)).toBe("<rendered page>");

    await post(id, auth).send({ guilds: 51 });
    expect(await h.redis.exists(key)).toBe(0);
  });

  it("when the bot had never posted, then the first post counts as a change", async () => {
    const { id, auth } = await newBot();
    const key = `${h.prefix}page:bot:${id}`;
    await h.redis.set(key, "<rendered page>");
    await post(id, auth).send({ server_count: 0 });
    expect(await h.redis.exists(key)).toBe(0);
  });

  it.each([
    [{ server_count: "1482" }, "server_count must be a number."],
    [{ guilds: "12" }, "guilds must be a number."],
    [{ server_count: -1 }, "server_count must not be negative."],
    [{ server_count: 1.5 }, "server_count must be a whole number."],
    [{ server_count: 2 ** 53 }, "server_count must be a safe integer."],
    [{ server_count: null }, "server_count must be a number."],
    [{ server_count: [1, "2"] }, "server_count[1] must be a number."],
    [{ shard_id: 0, shard_count: 2 }, "server_count is required."],
    [{}, "server_count is required."],
    [[1482], "The body must be a JSON object."],
    [1482, "The body must be a JSON object."],
  ])("when the body is %j, then 400 naming the first problem and nothing is written", async (body, error) => {
    const { id, auth } = await newBot(10);
    const res = await post(id, auth).set("Content-Type", "application/json").send(JSON.stringify(body));
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error });
    const stored = await row(id);
    expect(stored.serverCount).toBe(10n);
    expect(stored.checkedInAt).toBeNull();
  });

  it.each([
    ["JSON that does not parse", "application/json", '{"server_count": 12', 400, "Invalid JSON body."],
    ["an empty body", "application/json", "", 400, "Invalid JSON body."],
    [
      "a form body",
      "application/x-www-form-urlencoded",
      "server_count=12",
      400,
      "Content-Type must be application/json.",
    ],
    ["a text body", "text/plain", '{"server_count":12}', 400, "Content-Type must be application/json."],
    [
      "a body over 16 kB",
      "application/json",
      JSON.stringify({ server_count: 1, padding: "x".repeat(20_000) }),
      413,
      "The request body is too large.",
    ],
  ])("when the request carries %s, then %d with the error body", async (_name, type, body, status, error) => {
    const { id, auth } = await newBot();
    const res = await post(id, auth).set("Content-Type", type).send(body);
    expect(res.status).toBe(status);
    expect(res.body).toEqual({ error });
  });

  it("when the token is unknown and the body invalid, then 401 comes first", async () => {
    const { id } = await newBot();
    const res = await post(id, { Authorization: "nope" }).send({ server_count: "x" });
    expect(res.status).toBe(401);
  });
});

describe("POST /api/v1/bots/stats (no id: the token's bot)", () => {
  it("when a token posts without an id, then its own bot is updated", async () => {
    const mine = await newBot(1);
    const other = await newBot(2);
    const res = await request(app).post("/api/v1/bots/stats").set(mine.auth).send({ server_count: 99 });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ success: true, server_count: 99 });
    expect((await row(mine.id)).serverCount).toBe(99n);
    expect((await row(other.id)).serverCount).toBe(2n);
  });

  it("when the token is unknown, then 401", async () => {
    const res = await request(app)
      .post("/api/v1/bots/stats")
      .set("Authorization", "nope")
      .send({ server_count: 1 });
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ error: "Invalid token." });
  });
});

describe("storage failure", () => {
  it("when the write fails in PostgreSQL, then 500 with the error body", async () => {
    const { id, auth } = await newBot();
    const allowUpdates = await refuseBotUpdates(h.t, id);
    try {
      const res = await post(id, auth).send({ server_count: 3 });
      expect(res.status).toBe(500);
      expect(res.body).toEqual({ error: "The request could not be completed; retry with backoff." });
    } finally {
      await allowUpdates();
    }
  });
});

describe("concurrent posts (one statement and one commit per batch)", () => {
  /** The app (one batch at a time) behind a real listener, and `post` of a JSON body to it. */
  async function batchingServer() {
    const server = await listen(h.app({ limits: { stats: 1_000 }, batching: { maxInFlight: 1 } }));
    return {
      post: (path: string, token: string, body: unknown) =>
        fetch(`${server.base}${path}`, {
          method: "POST",
          headers: { authorization: token, "content-type": "application/json" },
          body: JSON.stringify(body),
        }).then(async (r) => ({ status: r.status, body: await r.json() })),
      close: () => server.close(),
    };
  }

  /** batchingServer() where every statement takes 50 ms longer, so requests pile up. */
  async function slowServer() {
    const server = await batchingServer();
    const queries = watchQueries(h.t.db.pool, { delayMs: 50 });
    return {
      statements: queries.names,
      post: server.post,
      async close() {
        queries.restore();
        await server.close();
      },
    };
  }

  /**
   * batchingServer() whose first stats statement is held until `release()`; `held` resolves once it
   * is; `statements` lists the bot ids of every stats statement.
   */
  async function gatedServer() {
    const server = await batchingServer();
    const pool = h.t.db.pool;
    const query = pool.query;
    const statements: string[][] = [];
    let release = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered = () => {};
    const held = new Promise<void>((resolve) => {
      entered = resolve;
    });
    pool.query = (async (...args: unknown[]) => {
      const config = args[0] as { name?: string; values?: unknown[] };
      if (typeof config === "object" && config.name === "api.stats") {
        statements.push(config.values?.[1] as string[]);
        if (statements.length === 1) {
          entered();
          await gate;
        }
      }
      return (query as (...a: unknown[]) => unknown).apply(pool, args);
    }) as typeof query;
    return {
      statements,
      held,
      release: () => release(),
      post: server.post,
      async close() {
        release();
        pool.query = query;
        await server.close();
      },
    };
  }

  it("when many bots post at once, then each gets its own answer, its own count and its own cache invalidation", async () => {
    const bots = await Promise.all(Array.from({ length: 12 }, () => newBot(100)));
    for (const b of bots) await h.redis.set(`${h.prefix}page:bot:${b.id}`, "<rendered page>");
    const s = await slowServer();
    try {
      // Even bots post their unchanged count, odd bots a new one; each bot posts twice at once.
      const wave = bots.flatMap((b, i) =>
        [0, 1].map(() =>
          s.post(`/api/v1/bots/${b.id}/stats`, b.auth.Authorization, { server_count: 100 + (i % 2) * i }),
        ),
      );
      const [answers, unknown, foreign] = await Promise.all([
        Promise.all(wave),
        s.post("/api/v1/bots/stats", "not-a-known-token", { server_count: 1 }),
        s.post(`/api/v1/bots/${bots[1]!.id}/stats`, bots[0]!.auth.Authorization, { server_count: 1 }),
      ]);
      answers.forEach((answer, k) => {
        const i = Math.floor(k / 2);
        expect(answer).toEqual({ status: 200, body: { success: true, server_count: 100 + (i % 2) * i } });
      });
      expect(unknown.status).toBe(401);
      expect(foreign.status).toBe(404);
      for (const [i, b] of bots.entries()) {
        const stored = await row(b.id);
        expect(stored.serverCount).toBe(BigInt(100 + (i % 2) * i));
        expect(await h.redis.exists(`${h.prefix}page:bot:${b.id}`)).toBe(i % 2 === 0 ? 1 : 0);
      }
      // 26 requests (plus the 401/404 look-ups): far fewer statements than requests.
      const writes = s.statements.filter((n) => n.startsWith("api.stats"));
      expect(writes.length).toBeGreaterThanOrEqual(2); // a bot's two posts never share one
      expect(writes.length).toBeLessThanOrEqual(13);
    } finally {
      await s.close();
    }
  });

  it("when one bot's row is refused inside a batch, then only that request fails; the others are written", async () => {
    const bots = await Promise.all(Array.from({ length: 6 }, () => newBot(1)));
    const refused = bots[2]!;
    const allowUpdates = await refuseBotUpdates(h.t, refused.id);
    const blocker = await newBot(1);
    const s = await gatedServer();
    try {
      // The blocker's statement holds the only slot (maxInFlight 1) until the six posts have passed
      // the rate limiter, so they queue behind it and leave together.
      const first = s.post(`/api/v1/bots/${blocker.id}/stats`, blocker.auth.Authorization, {
        server_count: 2,
      });
      await s.held;
      const pending = bots.map((b) =>
        s.post(`/api/v1/bots/${b.id}/stats`, b.auth.Authorization, { server_count: 7 }),
      );
      await waitFor(async () => {
        const counted = await Promise.all(
          bots.map((b) => h.redis.exists(`${h.prefix}rl:stats:${hashToken(b.auth.Authorization)}`)),
        );
        return counted.every((n) => n === 1);
      }, "the six posts to pass the rate limiter");
      s.release();
      const answers = await Promise.all(pending);
      expect((await first).status).toBe(200);
      expect(answers.map((a) => a.status)).toEqual(bots.map((b) => (b === refused ? 500 : 200)));
      // The blocker's statement, the batches of the six (usually one), then each bot of the batch
      // that failed alone: 1 + 1 + 6 when all six shared one batch.
      const [blockerStatement, ...rest] = s.statements;
      expect(blockerStatement).toEqual([blocker.id]);
      const seen = new Set<string>();
      const batches = rest.filter((ids) => {
        if (ids.some((id) => seen.has(id))) return false;
        for (const id of ids) seen.add(id);
        return true;
      });
      expect([...seen].sort()).toEqual(bots.map((b) => b.id).sort());
      const failed = batches.find((ids) => ids.includes(refused.id))!;
      expect(failed.length).toBeGreaterThan(1); // the refusal happened inside a batch
      expect(rest.slice(batches.length).map((ids) => ids.join())).toEqual(failed);
      expect(s.statements).toHaveLength(1 + batches.length + failed.length);
      for (const b of bots) expect((await row(b.id)).serverCount).toBe(b === refused ? 1n : 7n);
    } finally {
      await s.close();
      await allowUpdates();
    }
  });
});
