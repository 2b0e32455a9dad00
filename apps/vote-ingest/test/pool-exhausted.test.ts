/**
 * A pool with no free connection (DB_CONNECT_TIMEOUT_MS passed while every connection is busy):
 * the answer is the spec's 500 for a valid request that could not be stored, with its one-sentence
 * body and Retry-After, after the connect timeout and not later; nothing is written, and the same
 * app answers 201 once a connection is free again.
 */
import type { Server } from "node:http";
import { createDb, type Db } from "@botdir/db";
import {
  directUrlOf,
  randomBotId,
  randomUserId,
  seedBot,
  testRedisUrl,
  useTestDatabase,
} from "@botdir/db/testing";
import { MESSAGES } from "@botdir/schema";
import { Redis } from "ioredis";
import request from "supertest";
import { INTERNAL_KEY, ingestApp } from "./support/votes.js";

const CONNECT_TIMEOUT_MS = 300;
const t = useTestDatabase();
/** The app's own pool: one connection, the short connect timeout. */
let db: Db;
let redis: Redis;
let server: Server;
/** The pool's only connection, checked out by the test while it is held busy. */
let held: { release(): void } | undefined;

beforeAll(() => {
  db = createDb({
    url: t.url,
    directUrl: directUrlOf(t.url),
    poolMax: 1,
    connectionTimeoutMs: CONNECT_TIMEOUT_MS,
  });
  redis = new Redis(testRedisUrl(), { maxRetriesPerRequest: 1, lazyConnect: true });
  server = ingestApp({ db, redis }).listen(0);
});

afterEach(() => {
  held?.release();
  held = undefined;
});

afterAll(async () => {
  await new Promise((r) => server.close(r));
  redis.disconnect();
  await db.close();
});

const vote = (botId: string, userId: string) =>
  request(server)
    .post("/internal/v1/votes")
    .set("Authorization", INTERNAL_KEY)
    .send({ bot_id: botId, user_id: userId });

async function timed<T>(work: () => Promise<T>): Promise<{ res: T; ms: number }> {
  const t0 = Date.now();
  const res = await work();
  return { res, ms: Date.now() - t0 };
}

describe("vote-ingest with its pool held busy", () => {
  it("when the only connection stays busy past DB_CONNECT_TIMEOUT_MS, then a vote is answered 500 with the spec's body and Retry-After, nothing is written, and once the connection is free the same vote is 201", async () => {
    const bot = await seedBot(t.db);
    const userId = randomUserId();
    held = await db.pool.connect();

    const { res, ms } = await timed(() => vote(bot.id, userId));

    expect(res.status).toBe(500);
    expect(res.body).toEqual({ error: MESSAGES.internal });
    expect(res.headers["retry-after"]).toBe("5");
    expect(ms).toBeGreaterThanOrEqual(CONNECT_TIMEOUT_MS - 50);
    expect(ms).toBeLessThan(CONNECT_TIMEOUT_MS + 2_000);
    const { rows } = await t.db.pool.query("SELECT 1 FROM vote_log WHERE bot_id = $1 AND user_id = $2", [
      bot.id,
      userId,
    ]);
    expect(rows).toHaveLength(0);

    held?.release();
    held = undefined;
    expect((await vote(bot.id, userId)).status).toBe(201);
  });

  it("when the pool is busy, then creating a bot is answered the same 500 with Retry-After", async () => {
    held = await db.pool.connect();
    const res = await request(server)
      .post("/internal/v1/bots")
      .set("Authorization", INTERNAL_KEY)
      .send({ id: randomBotId() });
    expect({ status: res.status, body: res.body, retryAfter: res.headers["retry-after"] }).toEqual({
      status: 500,
      body: { error: MESSAGES.internal },
      retryAfter: "5",
    });
  });
});
