/**
 * Fault: webhook receivers that misbehave on purpose. Each costs exactly one failed attempt with the
 * right error kind; the dispatcher process's memory stays flat and its other deliveries go through
 * while a hostile one is in flight.
 */
import {
  createTestDatabase,
  type PrivateRedis,
  randomUserId,
  startRedisServer,
  type TestDatabase,
} from "@botdir/db/testing";
import { type AppProcess, freshKeys, startApp, stopAll, waitFor } from "../../src/processes.js";
import {
  type RawServer,
  type Receiver,
  startHugeBodyReceiver,
  startReceiver,
  startResettingReceiver,
  startSelfSignedReceiver,
  startSlowDripReceiver,
  type TlsReceiver,
} from "../../src/receivers.js";
import { appEnv, attemptsOf, castVote, deliveriesOf, seedWebhookBot } from "../../src/stack.js";

const TIMEOUT_MS = 3_000;
const keys = freshKeys();
let t: TestDatabase;
let redis: PrivateRedis;
let ingest: AppProcess;
let dispatcher: AppProcess;
let good: Receiver;
let slow: RawServer;
let huge: RawServer;
let reset: RawServer;
let tls: TlsReceiver;

beforeAll(async () => {
  [t, redis, good, slow, huge, reset, tls] = await Promise.all([
    createTestDatabase(),
    startRedisServer(),
    startReceiver(),
    startSlowDripReceiver(100),
    startHugeBodyReceiver(),
    startResettingReceiver(),
    startSelfSignedReceiver(),
  ]);
  // A retry is an hour away: every hostile receiver gets exactly one attempt during the test.
  const env = appEnv(
    { databaseUrl: t.url, redisUrl: redis.url, keys },
    {
      WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS),
      WEBHOOK_RETRY_DELAYS_MS: "3600000,3600000,3600000,3600000",
      DISPATCHER_LOCK_DURATION_MS: "30000",
      DISPATCHER_CONCURRENCY: "10",
    },
  );
  [ingest, dispatcher] = await Promise.all([
    startApp("vote-ingest", env),
    startApp("webhook-dispatcher", env),
  ]);
}, 60_000);

afterAll(async () => {
  await stopAll();
  await redis?.kill();
  await Promise.all([good, slow, huge, reset, tls].map((r) => r?.close()));
  await t?.drop();
});

async function voteFor(url: string) {
  const bot = await seedWebhookBot(t.db, keys, url);
  const cast = await castVote(ingest.base, keys.internalKey, bot.id, randomUserId());
  expect(cast.status).toBe(201);
  return bot;
}

/** Waits until the bot's single delivery has its first attempt recorded, and returns it. */
async function firstAttempt(botId: string, timeoutMs = 20_000) {
  return waitFor(
    async () => {
      const [delivery] = await deliveriesOf(t.db, botId);
      if (!delivery) return null;
      const attempts = await attemptsOf(t.db, delivery.id);
      return attempts.length > 0 ? { delivery, attempts } : null;
    },
    `the first attempt of bot ${botId}`,
    timeoutMs,
    50,
  );
}

describe("hostile webhook receivers", () => {
  it("when a receiver drips its status line byte by byte, then the attempt fails as timeout, and deliveries to a good receiver go through meanwhile", async () => {
    const slowBot = await voteFor(`http://127.0.0.1:${slow.port}/hook`);
    await waitFor(
      () => slow.connections === 1 && slow.bytesWritten > 0,
      "the slow receiver to start dripping",
    );
    const started = Date.now();

    const goodBots = await Promise.all(Array.from({ length: 10 }, () => voteFor(good.url("/hook"))));
    await waitFor(
      async () => {
        const rows = await Promise.all(goodBots.map((b) => deliveriesOf(t.db, b.id)));
        return rows.every((r) => r[0]?.state === "delivered");
      },
      "the good deliveries",
      TIMEOUT_MS,
      25,
    );
    const goodDone = Date.now();
    // The slow attempt is still in flight: nothing recorded for it yet.
    const [slowDelivery] = await deliveriesOf(t.db, slowBot.id);
    expect(await attemptsOf(t.db, slowDelivery!.id)).toHaveLength(0);
    expect(goodDone - started).toBeLessThan(TIMEOUT_MS);

    const { delivery, attempts } = await firstAttempt(slowBot.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([[1, null, "timeout"]]);
    expect(attempts[0]!.durationMs).toBeGreaterThanOrEqual(TIMEOUT_MS - 100);
    expect(attempts[0]!.durationMs).toBeLessThan(TIMEOUT_MS + 2_000);
    expect(delivery).toMatchObject({ state: "pending", attemptsMade: 1 });
    expect(good.requests).toHaveLength(10);
  });

  it("when a receiver answers 500 with a 1 GiB body, then the attempt fails as http_status 500 without the body being read, and the dispatcher's memory does not grow", async () => {
    const before = dispatcher.rssBytes();
    const bot = await voteFor(`http://127.0.0.1:${huge.port}/hook`);
    const { attempts } = await firstAttempt(bot.id);

    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([
      [1, 500, "http_status"],
    ]);
    // The dispatcher hung up after the status line: only what fit in socket buffers was written.
    await waitFor(() => huge.bytesWritten < 1024 ** 3, "the huge body to be cut off");
    expect(huge.bytesWritten).toBeLessThan(64 * 1024 ** 2);
    const after = dispatcher.rssBytes();
    expect(after - before).toBeLessThan(64 * 1024 ** 2);
    expect(dispatcher.alive()).toBe(true);
  });

  it("when a receiver resets the connection, then the attempt fails as connection", async () => {
    const bot = await voteFor(`http://127.0.0.1:${reset.port}/hook`);
    const { attempts } = await firstAttempt(bot.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([
      [1, null, "connection"],
    ]);
    expect(reset.connections).toBe(1);
  });

  it("when a receiver presents a self-signed certificate, then the attempt fails as tls and no request is sent", async () => {
    const bot = await voteFor(tls.url("/hook"));
    const { attempts } = await firstAttempt(bot.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([[1, null, "tls"]]);
    expect(tls.requests).toHaveLength(0);
  });

  it("when every hostile receiver has been tried, then the dispatcher still delivers to a good receiver at once and is healthy", async () => {
    const before = good.requests.length;
    const bot = await voteFor(good.url("/after"));
    const { attempts } = await firstAttempt(bot.id, 5_000);
    expect(attempts.map((a) => [a.statusCode, a.errorKind])).toEqual([[204, null]]);
    expect(good.requests.length).toBe(before + 1);
    const health = await fetch(`${dispatcher.base}/health`);
    expect(health.status).toBe(200);
  });
});
