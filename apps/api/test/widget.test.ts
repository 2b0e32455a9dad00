import type { RequestListener } from "node:http";
import { createDb } from "@botdir/db";
import { randomBotId, randomUserId, seedBot, watchQueries } from "@botdir/db/testing";
import request from "supertest";
import { WIDGET_QUERY_TIMEOUT_MS } from "../src/routes/widget.js";
import { WIDGET_LOCAL_CACHE_SECONDS, WIDGET_MISS_CACHE_SECONDS } from "../src/services/cache.js";
import { deadRedis, useHarness } from "./support.js";

const { h, app } = useHarness();

const DAY = 24 * 60 * 60 * 1000;

async function votesAgo(botId: string, daysAgo: number[]) {
  const now = h.clock.now().getTime();
  await h.t.db.prisma.vote.createMany({
    data: daysAgo.map((d) => ({ botId, userId: randomUserId(), votedAt: new Date(now - d * DAY) })),
  });
}

const widget = (id: string, on: RequestListener = app) =>
  request(on)
    .get(`/widget/${id}.svg`)
    .buffer(true)
    .parse((res, done) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        text += chunk;
      });
      res.on("end", () => done(null, text));
    });

describe("GET /widget/{id}.svg", () => {
  it("when the bot is listed, then a public SVG badge with its server count and 30-day votes, cached 5 minutes", async () => {
    const bot = await seedBot(h.t.db, { serverCount: 1482 });
    await votesAgo(bot.id, [0, 1, 29.9, 31, 400]);

    const res = await widget(bot.id);
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toBe("image/svg+xml; charset=utf-8");
    expect(res.headers["cache-control"]).toBe("public, max-age=300");
    expect(res.headers["ratelimit-limit"]).toBeUndefined();
    const svg = res.body as string;
    expect(svg.startsWith("<svg ")).toBe(true);
    expect(svg).toContain(">1,482</text>");
    expect(svg).toContain(">3</text>");
    expect(svg).toContain("servers: 1,482, votes (30 days): 3");
  });

  it("when the bot never posted stats, then the server count shows n/a", async () => {
    const bot = await seedBot(h.t.db);
    const svg = (await widget(bot.id)).body as string;
    expect(svg).toContain(">n/a</text>");
  });

  it("when asked again within 5 minutes, then the server-side cache answers even if the data changed", async () => {
    const bot = await seedBot(h.t.db, { serverCount: 10 });
    expect((await widget(bot.id)).body).toContain(">10</text>");
    const ttl = await h.redis.ttl(`${h.prefix}widget:bot:${bot.id}`);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(300);

    await h.t.db.prisma.bot.update({ where: { id: bot.id }, data: { serverCount: 20n } });
    expect((await widget(bot.id)).body).toContain(">10</text>");

    await h.redis.del(`${h.prefix}widget:bot:${bot.id}`); // the 5 minutes are over
    expect((await widget(bot.id)).body).toContain(">20</text>");
  });

  it.each([
    ["an unknown bot", "123456789012345678"],
    ["an invalid id", "not-a-bot"],
    ["a too-short id", "123"],
  ])("when asked for %s, then the neutral badge with 200, not an error page", async (_name, id) => {
    const res = await widget(id);
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toBe("image/svg+xml; charset=utf-8");
    expect(res.body).toContain("not listed");
  });

  it("when the bot is pending approval, then the neutral badge", async () => {
    const bot = await seedBot(h.t.db, { status: "pending", serverCount: 5 });
    expect((await widget(bot.id)).body).toContain("not listed");
  });

  it("when an id that is not listed is asked for 20 times, then one query answers them all until the miss is forgotten, and the bot approved meanwhile is listed after that", async () => {
    const bot = await seedBot(h.t.db, { status: "pending", serverCount: 12 });
    const unknown = randomBotId();
    const watch = watchQueries(h.t.db.pool);
    const queries = () => watch.names.filter((name) => name === "api.widget").length;
    try {
      for (let i = 0; i < 20; i++) {
        expect((await widget(bot.id)).body).toContain("not listed");
        expect((await widget(unknown)).body).toContain("not listed");
      }
      expect(queries()).toBe(2);
      expect(
        await h.redis.exists(`${h.prefix}widget:bot:${bot.id}`, `${h.prefix}widget:bot:${unknown}`),
      ).toBe(0);

      await h.t.db.prisma.bot.update({ where: { id: bot.id }, data: { status: "approved" } });
      expect((await widget(bot.id)).body).toContain("not listed");
      expect(queries()).toBe(2);

      h.clock.advance(WIDGET_MISS_CACHE_SECONDS * 1000 + 1);
      expect((await widget(bot.id)).body).toContain(">12</text>");
      expect(queries()).toBe(3);
    } finally {
      watch.restore();
    }
  });

  it("needs no credential and has no rate limit", async () => {
    const bot = await seedBot(h.t.db, { serverCount: 1 });
    const answers = await Promise.all(Array.from({ length: 30 }, () => widget(bot.id)));
    expect(answers.every((res) => res.status === 200)).toBe(true);
  });

  it("when Redis is down, then the badge is still served from PostgreSQL", async () => {
    const bot = await seedBot(h.t.db, { serverCount: 77 });
    const redis = deadRedis();
    const res = await request(h.app({ redis }))
      .get(`/widget/${bot.id}.svg`)
      .buffer(true)
      .parse((r, done) => {
        let text = "";
        r.setEncoding("utf8");
        r.on("data", (c: string) => {
          text += c;
        });
        r.on("end", () => done(null, text));
      });
    expect(res.status).toBe(200);
    expect(res.body).toContain(">77</text>");
    redis.disconnect();
  });

  it("when 20 requests miss the cache for one bot at once, then one query answers them all", async () => {
    const bot = await seedBot(h.t.db, { serverCount: 9 });
    await votesAgo(bot.id, [0, 2]);
    // Each statement is held 50 ms, so all 20 requests arrive while the first query is in flight.
    const watch = watchQueries(h.t.db.pool, { delayMs: 50 });
    try {
      const answers = await Promise.all(Array.from({ length: 20 }, () => widget(bot.id)));
      expect(answers.every((res) => res.status === 200 && (res.body as string).includes(">2</text>"))).toBe(
        true,
      );
      expect(watch.names.filter((name) => name === "api.widget")).toHaveLength(1);
    } finally {
      watch.restore();
    }
  });

  it("when Redis is down, then the process's own copy answers for a while instead of the database", async () => {
    const bot = await seedBot(h.t.db, { serverCount: 31 });
    const redis = deadRedis();
    const down = h.app({ redis });
    const watch = watchQueries(h.t.db.pool);
    try {
      for (let i = 0; i < 5; i++) expect((await widget(bot.id, down)).body).toContain(">31</text>");
      expect(watch.names.filter((name) => name === "api.widget")).toHaveLength(1);

      h.clock.advance(WIDGET_LOCAL_CACHE_SECONDS * 1000 + 1);
      expect((await widget(bot.id, down)).body).toContain(">31</text>");
      expect(watch.names.filter((name) => name === "api.widget")).toHaveLength(2);
    } finally {
      watch.restore();
      redis.disconnect();
    }
  });

  it("when the database is unreachable, then a listed bot gets the error badge with 503 and a short cache, never 'not listed'", async () => {
    const bot = await seedBot(h.t.db, { serverCount: 5 });
    const deadDb = createDb({ url: "postgresql://postgres@127.0.0.1:1/botdir", poolMax: 1 });
    try {
      const res = await widget(bot.id, h.app({ db: deadDb }));
      expect(res.status).toBe(503);
      expect(res.headers["content-type"]).toBe("image/svg+xml; charset=utf-8");
      expect(res.headers["cache-control"]).toBe("public, max-age=10");
      expect(res.body).toContain("unavailable");
      expect(res.body).not.toContain("not listed");
      expect(h.logger.events("widget_failed").length).toBeGreaterThan(0);
    } finally {
      await deadDb.close();
    }
  });

  it("when the count query does not answer in time, then the error badge with 503, and nothing is cached", async () => {
    const bot = await seedBot(h.t.db, { serverCount: 6 });
    const watch = watchQueries(h.t.db.pool, { delayMs: WIDGET_QUERY_TIMEOUT_MS + 300 });
    try {
      const res = await widget(bot.id);
      expect(res.status).toBe(503);
      expect(res.body).toContain("unavailable");
    } finally {
      watch.restore();
    }
    expect(await h.redis.get(`${h.prefix}widget:bot:${bot.id}`)).toBeNull();
    expect((await widget(bot.id)).body).toContain(">6</text>");
  });
});
