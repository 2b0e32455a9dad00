import { randomUserId, seedBot } from "@botdir/db/testing";
import { VOTE_CURSOR_SETTLE_MS, VotesPage } from "@botdir/schema";
import request from "supertest";
import { expectAnswer, useHarness } from "./support.js";

const { h, app } = useHarness({ limits: { votes: 10_000 } });

interface Vote {
  user_id: string;
  voted_at: string;
}

async function newBot() {
  const bot = await seedBot(h.t.db);
  return { id: bot.id, auth: { Authorization: bot.token! } };
}

/** `n` votes one minute apart from `start`, oldest first. */
async function seedVotes(botId: string, n: number, start = Date.parse("2026-11-01T00:00:00.000Z")) {
  const data = Array.from({ length: n }, (_, i) => ({
    botId,
    userId: randomUserId(),
    votedAt: new Date(start + i * 60_000),
  }));
  await h.t.db.prisma.vote.createMany({ data });
  return data.map((v) => ({ user_id: v.userId, voted_at: v.votedAt.toISOString() }));
}

const votes = (id: string, auth: Record<string, string>, query: Record<string, string | number> = {}) =>
  request(app).get(`/api/v1/bots/${id}/votes`).query(query).set(auth);

/** Follows nextCursor from the first page to the last; returns every page. */
async function walk(id: string, auth: Record<string, string>, first: Record<string, string | number>) {
  const pages: VotesPage[] = [];
  let query = first;
  for (;;) {
    const res = await votes(id, auth, query);
    expect(res.status).toBe(200);
    const page = VotesPage.strict().parse(res.body);
    pages.push(page);
    if (page.nextCursor === undefined) return pages;
    query = { cursor: page.nextCursor, limit: first.limit ?? 50 };
  }
}

describe("GET /api/v1/bots/{id}/votes?since=&cursor=", () => {
  it("when since is given, then the votes at or after it come oldest first, paged, with no nextCursor on the last page", async () => {
    const { id, auth } = await newBot();
    const all = await seedVotes(id, 7);
    const pages = await walk(id, auth, { since: all[2]!.voted_at, limit: 2 });
    expect(pages.map((p) => p.votes)).toEqual([all.slice(2, 4), all.slice(4, 6), all.slice(6)]);
    expect(pages.map((p) => p.nextCursor === undefined)).toEqual([false, false, true]);
  });

  it("when the last page is exactly full, then it has no nextCursor", async () => {
    const { id, auth } = await newBot();
    const all = await seedVotes(id, 4);
    const pages = await walk(id, auth, { since: "2026-10-01T00:00:00+02:00", limit: 2 });
    expect(pages.map((p) => p.votes)).toEqual([all.slice(0, 2), all.slice(2, 4)]);
  });

  it("when only a cursor is given, then it continues where its page ended; since and cursor together both apply", async () => {
    const { id, auth } = await newBot();
    const all = await seedVotes(id, 6);
    const first = await votes(id, auth, { since: all[0]!.voted_at, limit: 2 });
    const cursor = first.body.nextCursor as string;
    expect((await votes(id, auth, { cursor, limit: 3 })).body.votes).toEqual(all.slice(2, 5));
    const both = await votes(id, auth, { cursor, since: all[4]!.voted_at, limit: 3 });
    expect(both.body.votes).toEqual(all.slice(4, 6));
  });

  it("when the newest votes are younger than the settle time, then they are listed only once they are older", async () => {
    const { id, auth } = await newBot();
    const now = h.clock.now().getTime();
    const [settled] = await seedVotes(id, 1, now - VOTE_CURSOR_SETTLE_MS);
    const [young] = await seedVotes(id, 1, now - VOTE_CURSOR_SETTLE_MS + 1);
    const since = new Date(now - 60_000).toISOString();
    expect((await votes(id, auth, { since })).body).toEqual({ votes: [settled] });
    h.clock.advance(1);
    expect((await votes(id, auth, { since })).body).toEqual({ votes: [settled, young] });
  });

  it("when new votes arrive while the log is paged, then every vote is listed exactly once, in order", async () => {
    const { id, auth } = await newBot();
    const expected: Vote[] = await seedVotes(id, 200);
    const listed: Vote[] = [];
    let query: Record<string, string | number> = { since: "2026-01-01T00:00:00.000Z", limit: 17 };
    for (let page = 0; ; page++) {
      // The page is read while other connections append votes, some committing out of time order.
      const arriving =
        page < 6
          ? Promise.all(
              [900, 100, 500].map(async (ago) => {
                const vote = {
                  botId: id,
                  userId: randomUserId(),
                  votedAt: new Date(h.clock.now().getTime() - ago),
                };
                await h.t.db.prisma.vote.create({ data: vote });
                return { user_id: vote.userId, voted_at: vote.votedAt.toISOString() };
              }),
            )
          : Promise.resolve([]);
      const [res, arrived] = await Promise.all([votes(id, auth, query), arriving]);
      expected.push(...arrived);
      expect(res.status).toBe(200);
      listed.push(...res.body.votes);
      h.clock.advance(2_000);
      if (page === 6) h.clock.advance(VOTE_CURSOR_SETTLE_MS);
      if (res.body.nextCursor === undefined) break;
      query = { cursor: res.body.nextCursor, limit: 17 };
    }
    const key = (v: Vote) => `${v.voted_at} ${v.user_id}`;
    expect(new Set(listed.map(key)).size).toBe(listed.length);
    expect(listed.map(key).sort()).toEqual(expected.map(key).sort());
    expect(listed.map((v) => v.voted_at)).toEqual(listed.map((v) => v.voted_at).sort());
    expect(listed.length).toBe(200 + 18);
  });

  it("when a vote commits after a vote with a later time, then a client resuming from its last vote still gets it", async () => {
    const { id, auth } = await newBot();
    // Two different hours, so the two inserts do not queue on one vote-counter row.
    h.clock.set("2026-11-21T13:00:05.000Z");
    const old = await seedVotes(id, 2, Date.parse("2026-11-21T12:00:00.000Z"));
    const client = await h.t.db.pool.connect();
    try {
      await client.query("BEGIN");
      await client.query("INSERT INTO vote_log (bot_id, user_id, voted_at) VALUES ($1, $2, $3)", [
        id,
        "300000000000000001",
        "2026-11-21T12:59:59.000Z",
      ]);
      const [early] = await seedVotes(id, 1, Date.parse("2026-11-21T13:00:01.000Z"));
      const before = await walk(id, auth, { since: old[0]!.voted_at, limit: 3 });
      await client.query("COMMIT");
      h.clock.advance(VOTE_CURSOR_SETTLE_MS);
      const last = before.at(-1)?.votes.at(-1);
      const after = await walk(id, auth, { since: last!.voted_at, limit: 3 });
      const seen = new Set([...before, ...after].flatMap((p) => p.votes.map((v) => v.user_id)));
      expect([...seen].sort()).toEqual(
        [old[0]!.user_id, old[1]!.user_id, "300000000000000001", early!.user_id].sort(),
      );
    } finally {
      await client.query("ROLLBACK").catch(() => {});
      client.release();
    }
  });

  it("when a page is asked, then the plain list's rate-limit budget is the one spent", async () => {
    const limited = h.app({ limits: { votes: 2 } });
    const { id, auth } = await newBot();
    const get = (query: Record<string, string>) =>
      request(limited).get(`/api/v1/bots/${id}/votes`).query(query).set(auth);
    expect((await get({})).status).toBe(200);
    expect((await get({ since: "2026-01-01T00:00:00Z" })).status).toBe(200);
    const third = await get({ since: "2026-01-01T00:00:00Z" });
    expect(third.status).toBe(429);
    expect(third.body).toEqual({ error: "Rate limit exceeded.", retryAfter: expect.any(Number) });
  });

  it("when the route without an id pages, then it walks the token's bot", async () => {
    const { id, auth } = await newBot();
    const all = await seedVotes(id, 3);
    const first = await request(app)
      .get("/api/v1/bots/votes")
      .query({ since: all[0]!.voted_at, limit: 2 })
      .set(auth);
    expect(first.body.votes).toEqual(all.slice(0, 2));
    const next = await request(app)
      .get("/api/v1/bots/votes")
      .query({ cursor: first.body.nextCursor })
      .set(auth);
    expect(next.body).toEqual({ votes: all.slice(2) });
  });
});

describe("refusals of the paging parameters", () => {
  it("when the cursor is another bot's, then 400 with one sentence and none of either bot's votes", async () => {
    const mine = await newBot();
    const other = await newBot();
    const theirs = await seedVotes(other.id, 3);
    await seedVotes(mine.id, 3);
    const cursor = (await votes(other.id, other.auth, { since: theirs[0]!.voted_at, limit: 1 })).body
      .nextCursor;
    expect(cursor).toEqual(expect.any(String));
    const res = await votes(mine.id, mine.auth, { cursor });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "cursor belongs to another bot's vote log." });
  });

  it.each([
    ["not base64url", "!!!"],
    ["random text", "aGVsbG8gd29ybGQ"],
    ["a bot id that is not an id", Buffer.from("1.12.1795262400000.5").toString("base64url")],
    ["an unknown version", Buffer.from("2.123456789012345678.1795262400000.5").toString("base64url")],
    [
      "a vote id over the bigint range",
      Buffer.from("1.123456789012345678.1.9999999999999999999").toString("base64url"),
    ],
    ["padding added", `${Buffer.from("1.123456789012345678.1795262400000.5").toString("base64url")}=`],
    ["too long", "A".repeat(201)],
  ])("when the cursor is %s, then 400 with one sentence", async (_what, cursor) => {
    const { id, auth } = await newBot();
    const res = await votes(id, auth, { cursor });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "cursor is not a cursor this API issued." });
  });

  it("when the route without an id gets another bot's cursor, then 400 with one sentence", async () => {
    const mine = await newBot();
    const other = await newBot();
    const cursor = Buffer.from(`1.${other.id}.1795262400000.5`).toString("base64url");
    const res = await request(app).get("/api/v1/bots/votes").query({ cursor }).set(mine.auth);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "cursor belongs to another bot's vote log." });
  });

  it("when the cursor is another bot's, then the vote log is not read (with or without an id in the path)", async () => {
    const names: string[] = [];
    const pool = h.t.db.pool;
    const watched = new Proxy(pool, {
      get(target, prop) {
        if (prop === "query") {
          return (query: unknown, ...rest: unknown[]) => {
            names.push(
              typeof query === "object" && query !== null ? String((query as { name?: string }).name) : "",
            );
            return (target.query as (...args: unknown[]) => unknown)(query, ...rest);
          };
        }
        const value = Reflect.get(target, prop);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const watchedApp = h.app({ db: { ...h.t.db, pool: watched } });
    const mine = await newBot();
    const other = await newBot();
    const cursor = Buffer.from(`1.${other.id}.1795262400000.5`).toString("base64url");
    for (const path of [`/api/v1/bots/${mine.id}/votes`, "/api/v1/bots/votes"]) {
      const res = await request(watchedApp).get(path).query({ cursor }).set(mine.auth);
      expect(res.body).toEqual({ error: "cursor belongs to another bot's vote log." });
    }
    const own = await request(watchedApp)
      .get("/api/v1/bots/votes")
      .query({ cursor: Buffer.from(`1.${mine.id}.1795262400000.5`).toString("base64url") })
      .set(mine.auth);
    expect(own.status).toBe(200);
    // The own cursor's page is the one read of the log.
    expect(names.filter((name) => name === "api.votes-since")).toEqual(["api.votes-since"]);
  });

  // The four inputs of issue 33: each once wrote a date PostgreSQL refuses and answered 500.
  const sinceRange = "since must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z (UTC).";
  const cursorAt = (id: string, ms: string) => Buffer.from(`1.${id}.${ms}.5`).toString("base64url");
  it.each([
    ["since in year 0000", () => ({ since: "0000-01-01T00:00:00Z" }), sinceRange],
    [
      "since in year 0000 at +14:00 (year -1 in UTC)",
      () => ({ since: "0000-01-01T00:00:00+14:00" }),
      sinceRange,
    ],
    [
      "since in year 9999 at -14:00 (year 10000 in UTC)",
      () => ({ since: "9999-12-31T23:59:59-14:00" }),
      sinceRange,
    ],
    ["since in year 99999", () => ({ since: "99999-01-01T00:00:00Z" }), sinceRange],
    ["since in year +010000 (expanded)", () => ({ since: "+010000-01-01T00:00:00Z" }), sinceRange],
    ["since in year -000001 (expanded)", () => ({ since: "-000001-01-01T00:00:00Z" }), sinceRange],
    ["since in year 0000 with milliseconds", () => ({ since: "0000-06-01T00:00:00.000Z" }), sinceRange],
    [
      "a cursor at 999999999999999 ms",
      (id: string) => ({ cursor: cursorAt(id, "999999999999999") }),
      "cursor is not a cursor this API issued.",
    ],
  ])("when the input is %s, then 400 with one sentence", async (_what, query, error) => {
    const { id, auth } = await newBot();
    const res = await votes(id, auth, query(id));
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error });
  });

  it("when since is at either end of the readable years, then 200", async () => {
    const { id, auth } = await newBot();
    const all = await seedVotes(id, 2);
    expect((await votes(id, auth, { since: "0001-01-01T00:00:00Z" })).body).toEqual({ votes: all });
    expect((await votes(id, auth, { since: "9999-12-31T23:59:59.999Z" })).body).toEqual({ votes: [] });
    const lateCursor = Buffer.from(`1.${id}.253402300799999.5`).toString("base64url");
    expect((await votes(id, auth, { cursor: lateCursor })).body).toEqual({ votes: [] });
  });

  it("when the cursor is empty, then 400", async () => {
    const { id, auth } = await newBot();
    const res = await votes(id, auth, { cursor: "" });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "cursor must not be empty." });
  });

  it.each([["yesterday"], ["2026-11-21"], ["2026-11-21T12:00:00"], ["2026-02-30T12:00:00Z"], [""]])(
    "when since is %j, then 400 naming since",
    async (since) => {
      const { id, auth } = await newBot();
      const res = await votes(id, auth, { since });
      expect(res.status).toBe(400);
      expect(res.body).toEqual({
        error: "since must be an ISO 8601 date-time with a time zone, e.g. 2026-11-21T12:00:00.000Z.",
      });
    },
  );

  it("when the cursor is malformed and the token unknown or the id another bot's, then 401 and 404 come first", async () => {
    const mine = await newBot();
    const other = await newBot();
    expect((await votes(mine.id, { Authorization: "unknown-token" }, { cursor: "!!!" })).status).toBe(401);
    const foreign = await votes(other.id, mine.auth, { cursor: "!!!", since: "x" });
    expectAnswer(foreign, 404, '{"error":"Bot not found."}');
  });

  it("when neither since nor cursor is given, then the newest votes come first as before", async () => {
    const { id, auth } = await newBot();
    const all = await seedVotes(id, 3);
    const res = await votes(id, auth, { limit: 2 });
    expect(res.body).toEqual({ votes: [all[2], all[1]] });
  });
});
