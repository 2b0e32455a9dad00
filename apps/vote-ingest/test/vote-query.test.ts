/**
 * The vote page's query string on POST /internal/v1/votes: a flat map of strings kept with the vote
 * (vote_log.query), null when none was given; a map out of bounds is a 400 that names `query` and
 * writes nothing.
 */
import type { Server } from "node:http";
import { randomUserId, seedBot } from "@botdir/db/testing";
import request from "supertest";
import { INTERNAL_KEY, logCount, setWebhook, useIngestFixture } from "./support/votes.js";

const t = useIngestFixture();
let server: Server;

beforeAll(() => {
  server = t.app().listen(0);
});

afterAll(async () => {
  await new Promise((r) => server.close(r));
});

const cast = (body: unknown) =>
  request(server)
    .post("/internal/v1/votes")
    .set("Authorization", INTERNAL_KEY)
    .send(body as object);

async function storedQuery(botId: string, userId: string): Promise<unknown> {
  const { rows } = await t.db.pool.query<{ query: unknown }>(
    "SELECT query FROM vote_log WHERE bot_id = $1 AND user_id = $2",
    [botId, userId],
  );
  expect(rows).toHaveLength(1);
  return rows[0]?.query;
}

describe("POST /internal/v1/votes with query", () => {
  it("when the site passes a query, then 201 with the usual body and the log row keeps it as given", async () => {
    const bot = await seedBot(t.db);
    await setWebhook(t.db, bot.id);
    const userId = randomUserId();
    const query = { ref: "discord-ad", utm_source: "ünï 🎉", empty: "" };
    const res = await cast({ bot_id: bot.id, user_id: userId, query });
    expect(res.status).toBe(201);
    expect(Object.keys(res.body)).toEqual(["vote", "nextVoteAt"]);
    expect(await storedQuery(bot.id, userId)).toEqual(query);
  });

  it.each([
    ["left out", {}],
    ["null", { query: null }],
    ["an empty object", { query: {} }],
  ])("when the query is %s, then the log row keeps none (null)", async (_name, extra) => {
    const bot = await seedBot(t.db);
    const userId = randomUserId();
    const res = await cast({ bot_id: bot.id, user_id: userId, ...extra });
    expect(res.status).toBe(201);
    expect(await storedQuery(bot.id, userId)).toBeNull();
  });

  it("when the query has exactly 20 keys and 1024 bytes, then it is accepted", async () => {
    const bot = await seedBot(t.db);
    const userId = randomUserId();
    // 20 keys of 3 bytes ("k00"…"k19"), 19 values "v", and one of 945 bytes ("é" is 2): 1024 in all.
    const query = Object.fromEntries(
      Array.from({ length: 20 }, (_, i) => [
        `k${String(i).padStart(2, "0")}`,
        i === 0 ? `éé${"v".repeat(941)}` : "v",
      ]),
    );
    const bytes = Object.entries(query).reduce(
      (n, [k, v]) => n + Buffer.byteLength(k) + Buffer.byteLength(v),
      0,
    );
    expect(bytes).toBe(1024);
    const res = await cast({ bot_id: bot.id, user_id: userId, query });
    expect(res.status).toBe(201);
    expect(await storedQuery(bot.id, userId)).toEqual(query);
  });

  it.each([
    ["not an object", "ref=ad", "query must be a flat JSON object of string values."],
    ["an array", ["ref", "ad"], "query must be a flat JSON object of string values."],
    ["a number value", { ref: 1 }, "query must be a flat JSON object of string values."],
    ["a nested object", { ref: { a: "b" } }, "query must be a flat JSON object of string values."],
    [
      "21 keys",
      Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`k${i}`, "v"])),
      "query must have at most 20 keys.",
    ],
    ["1025 bytes", { r: "é".repeat(512) }, "query must be at most 1024 bytes (keys and values, UTF-8)."],
    [
      "a key that is a whole sentence of its own",
      { "bad\nkey. Another sentence.": 7 },
      "query must be a flat JSON object of string values.",
    ],
  ])(
    "when the query is %s, then 400 naming query in one sentence and nothing is written",
    async (_name, query, error) => {
      const bot = await seedBot(t.db);
      const userId = randomUserId();
      const res = await cast({ bot_id: bot.id, user_id: userId, query });
      expect(res.status).toBe(400);
      expect(res.body).toEqual({ error });
      expect(await logCount(t.db, bot.id)).toBe(0);
    },
  );
});
