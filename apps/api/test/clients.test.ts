/**
 * Replays of the exact requests existing client libraries send (see /work/notes/client-libraries.md:
 * dbots.js services, @top-gg/sdk, dblapi.js, topggpy/dblpy, the Java and .NET top.gg SDKs,
 * botlister, BLAPI), with only the base URL pointed at us (`https://<host>/api/v1`).
 * Bodies are sent as the raw bytes the libraries produce.
 */

import type { RequestListener } from "node:http";
import { seedBot } from "@botdir/db/testing";
import request from "supertest";
import { castVote, createHarness, type Harness } from "./support.js";

let h: Harness;
let app: RequestListener;
let bot: { id: string; token: string };

const VOTER = "987654321098765432";

beforeAll(async () => {
  h = await createHarness();
  app = h.app();
  const seeded = await seedBot(h.t.db);
  bot = { id: seeded.id, token: seeded.token! };
  await castVote(h.t, bot.id, VOTER, h.clock.now());
});

afterAll(async () => {
  await h.close();
});

const storedCount = async () =>
  Number((await h.t.db.prisma.bot.findUniqueOrThrow({ where: { id: bot.id } })).serverCount);

/**
 * One library's stats request. Where a row names no `path` or `headers`, the library sends what
 * most do: POST /api/v1/bots/{id}/stats with the bare token and `Content-Type: application/json`.
 */
interface Replay {
  client: string;
  /** The path it posts to; `{id}` stands for the bot's id. */
  path?: string;
  /** The headers it sends; `{token}` stands for the bot's token. */
  headers?: Record<string, string>;
  /** The bytes of its body. */
  body: string;
  /** The server count those bytes mean. */
  expected: number;
}

const TOKEN = "{token}";
/** The content type axios 0.x sends (dbots.js). */
const AXIOS_JSON = "application/json;charset=utf-8";
const DBOTS_UA = "dbots (https://github.com/dbots-pkg/dbots.js 9.0.1) Node.js/v20.20.0";
const TOPGGPY_UA = "topggpy (https://github.com/top-gg/python-sdk 1.4.0) Python/3.11 aiohttp/3.9";

const STATS_REPLAYS: Replay[] = [
  {
    client: "dbots.js TopGG service (top.gg style: bare token, axios 0.x charset content type)",
    headers: { Authorization: TOKEN, "Content-Type": AXIOS_JSON, "User-Agent": DBOTS_UA },
    body: '{"server_count":1500,"shard_id":0,"shard_count":2}',
    expected: 1500,
  },
  {
    client: "dbots.js DiscordBotList service (discordbotlist.com style: Bot scheme, guilds)",
    headers: { Authorization: `Bot ${TOKEN}`, "Content-Type": AXIOS_JSON, "User-Agent": DBOTS_UA },
    body: '{"guilds":1501,"shard_id":0,"users":250000,"voice_connections":3}',
    expected: 1501,
  },
  {
    client: "dbots.js DiscordBotsGG service (discord.bots.gg style: guildCount, shardId/shardCount)",
    headers: {
      Authorization: TOKEN,
      "Content-Type": AXIOS_JSON,
      "User-Agent": "dbots-0000/9.0.1 (unknown; +https://github.com/dbots-pkg/dbots.js) DBots/123",
    },
    body: '{"guildCount":1502,"shardId":0,"shardCount":2}',
    expected: 1502,
  },
  {
    client: "botlister (discordbotlist.com's own library: Bot scheme, Accept header)",
    headers: {
      Authorization: `Bot ${TOKEN}`,
      "Content-Type": "application/json",
      Accept: "application/json",
      "User-Agent": "Botlister (https://github.com/discordbots/botlister, 1.0.0)",
    },
    body: '{"guilds":1503,"users":250000,"voice_connections":3,"shard_id":0}',
    expected: 1503,
  },
  {
    client: "@top-gg/sdk v3 postStats (no id in the path, lower-case headers)",
    path: "/api/v1/bots/stats",
    headers: { authorization: TOKEN, "content-type": "application/json" },
    body: '{"server_count":1504,"shard_id":0,"shard_count":2}',
    expected: 1504,
  },
  {
    client: "@top-gg/sdk (node-fetch version) with the doubled slash of its base URL",
    path: "/api/v1//bots/stats",
    body: '{"server_count":1505}',
    expected: 1505,
  },
  {
    client: "dblapi.js with server_count as per-shard counts",
    path: "/api/v1/bots/stats",
    body: '{"server_count":[700,806]}',
    expected: 1506,
  },
  {
    client: "topggpy 1.x post_guild_count (no id, shard_id 0 dropped)",
    path: "/api/v1/bots/stats",
    headers: { Authorization: TOKEN, "Content-Type": "application/json", "User-Agent": TOPGGPY_UA },
    body: '{"server_count":1507,"shard_count":2}',
    expected: 1507,
  },
  {
    client: "dblpy 0.x (shard_no instead of shard_id)",
    body: '{"server_count":1508,"shard_count":2,"shard_no":1}',
    expected: 1508,
  },
  {
    client: "top.gg Java SDK sharded form (shards only)",
    headers: { Authorization: TOKEN, "Content-Type": "application/json; charset=utf-8" },
    body: '{"shards":[800,709]}',
    expected: 1509,
  },
  {
    client: "top.gg .NET SDK sharded form (server_count 0 beside shards)",
    headers: { Authorization: TOKEN, "Content-Type": "application/json; charset=utf-8" },
    body: '{"shards":[1000,510],"shard_id":0,"shard_count":2,"server_count":0}',
    expected: 1510,
  },
  {
    client: "dbots.js BotlistMe service (trailing slash)",
    path: "/api/v1/bots/{id}/stats/",
    headers: { Authorization: TOKEN, "Content-Type": AXIOS_JSON },
    body: '{"server_count":1511}',
    expected: 1511,
  },
  {
    client: "BLAPI posting to a discord.bots.gg-style list (bare token)",
    body: '{"guildCount":1512}',
    expected: 1512,
  },
];

describe("stats as existing client libraries send them", () => {
  it.each(STATS_REPLAYS)("$client: 2xx with a JSON body, and the count is stored", async (replay) => {
    const path = replay.path ?? "/api/v1/bots/{id}/stats";
    const headers = replay.headers ?? { Authorization: TOKEN, "Content-Type": "application/json" };
    let req = request(app).post(path.replace("{id}", bot.id));
    for (const [name, value] of Object.entries(headers)) req = req.set(name, value.replace(TOKEN, bot.token));
    const res = await req.send(replay.body);
    expect(res.status).toBe(200);
    // topggpy only parses JSON when the content type is exactly this; dblpy parses every 2xx body.
    expect(res.headers["content-type"]).toBe("application/json; charset=utf-8");
    expect(JSON.parse(res.text)).toEqual({ success: true, server_count: replay.expected });
    expect(await storedCount()).toBe(replay.expected);
  });
});

describe("vote checks as top.gg-style clients do them", () => {
  it("@top-gg/sdk v3 hasVoted: GET /bots/check?userId= without an id, reads !!body.voted", async () => {
    const res = await request(app).get(`/api/v1/bots/check?userId=${VOTER}`).set("authorization", bot.token);
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]?.startsWith("application/json")).toBe(true);
    expect(Boolean(res.body.voted)).toBe(true);
  });

  it("topggpy get_user_vote: GET /bots/{id}/check?userId=, needs the exact JSON content type and an int voted", async () => {
    const res = await request(app)
      .get(`/api/v1/bots/${bot.id}/check?userId=${VOTER}`)
      .set("Authorization", bot.token)
      .set("User-Agent", TOPGGPY_UA);
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toBe("application/json; charset=utf-8");
    expect(Boolean(res.body.voted)).toBe(true);
  });

  it('top.gg Java SDK hasVoted: json.getInt("voted") == 1 needs an integer, not a boolean', async () => {
    const res = await request(app)
      .get(`/api/v1/bots/${bot.id}/check?userId=${VOTER}`)
      .set("Authorization", bot.token);
    expect(res.status).toBe(200);
    expect(res.text).toMatch(/^\{"voted":1,/);
    expect(Number.isInteger(res.body.voted)).toBe(true);
  });

  it("dbots.js TopGG userVoted (bare token): reads .data.voted; a user who did not vote gets 0", async () => {
    const res = await request(app)
      .get(`/api/v1/bots/${bot.id}/check?userId=111111111111111111`)
      .set("Authorization", bot.token)
      .set("User-Agent", DBOTS_UA);
    expect(res.status).toBe(200);
    expect(res.body.voted).toBe(0);
  });
});
