/** Shared arrangement of vote-ingest's tests: apps on a test database, Redis, and a test queue. */
import type { Db } from "@botdir/db";
import { createTestDatabase, testRedisPrefix, testRedisUrl, useForFile } from "@botdir/db/testing";
import { type Logger, ManualClock, type RedisClient } from "@botdir/service-kit";
import { connectRedis, silentLogger } from "@botdir/service-kit/testing";
import type { Express } from "express";
import { Redis } from "ioredis";
import { createApp } from "../../src/app.js";
import type { IngestDeps } from "../../src/deps.js";
import { createDeliveryQueue, type DeliveryQueue } from "../../src/outbox/queue.js";

export const INTERNAL_KEY = "internal-key-for-tests-0123456789";

/** A fail-fast connection, as main.ts creates it; resolves once it is ready. */
export function fastRedis(url: string): Promise<Redis> {
  return connectRedis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 1, connectTimeout: 1_000 });
}

/**
 * A queue under a key prefix of its own (the BullMQ prefix must not end with ':'); `batchMax` is
 * DELIVERY_JOB_BATCH_MAX (default: the production default).
 */
export function testQueue(
  db: Db,
  redis: Redis,
  logger: Logger = silentLogger,
  options: { batchMax?: number } = {},
): DeliveryQueue {
  return createDeliveryQueue({ db, redis, prefix: `${testRedisPrefix()}bull`, logger, ...options });
}

/**
 * vote-ingest's app as every test builds it: the test's database and Redis, and every other
 * dependency named here (a manual clock, the silent logger, INTERNAL_KEY, private targets refused,
 * no DNS, no queue, no secret box), each replaced by what the test passes.
 */
export function ingestApp(deps: { db: Db; redis: RedisClient } & Partial<IngestDeps>): Express {
  return createApp({
    clock: new ManualClock(),
    logger: silentLogger,
    internalApiKey: INTERNAL_KEY,
    allowPrivateTargets: false,
    webhookResolver: null,
    ...deps,
  });
}

/**
 * The arrangement most vote-ingest tests share: a test database, a fail-fast Redis connection to
 * the test Redis (or to `redisUrl`, a Redis server a test file runs itself) and a delivery queue
 * under a key prefix of its own on it.
 */
export async function startIngestFixture(options: { poolMax?: number; redisUrl?: string } = {}) {
  const t = await createTestDatabase(options.poolMax === undefined ? {} : { poolMax: options.poolMax });
  const redis = await fastRedis(options.redisUrl ?? testRedisUrl());
  const queue = testQueue(t.db, redis);
  return {
    db: t.db,
    /** The database's URL (for a CLI run against it). */
    url: t.url,
    redis,
    queue,
    /** ingestApp on this database, Redis and queue, with `deps` replacing any of it. */
    app: (deps: Partial<IngestDeps> = {}): Express =>
      ingestApp({ db: t.db, redis, deliveryQueue: queue, ...deps }),
    /** Removes the queue's jobs and closes everything; drops the database. */
    async close(): Promise<void> {
      await queue.queue.obliterate({ force: true }).catch(() => {});
      await queue.close().catch(() => {});
      redis.disconnect();
      await t.drop();
    },
  };
}

export type IngestFixture = Awaited<ReturnType<typeof startIngestFixture>>;

/** This test file's IngestFixture: started before its tests, closed after them. */
export function useIngestFixture(options: { poolMax?: number } = {}): IngestFixture {
  return useForFile(
    "the vote-ingest fixture",
    () => startIngestFixture(options),
    (fixture) => fixture.close(),
  );
}

/**
 * The management API's arrangement: this test file's database and a Redis connection made on first
 * use, without a delivery queue; `app` builds ingestApp on them with the file's `deps` (its key,
 * secret box, DNS answers...), then `overrides`.
 */
export function useIngestApp(deps: Partial<IngestDeps> = {}) {
  return useForFile(
    "the vote-ingest app's database and Redis",
    async () => {
      const t = await createTestDatabase();
      const redis = new Redis(testRedisUrl(), { maxRetriesPerRequest: 1, lazyConnect: true });
      return {
        db: t.db,
        /** The database's URL (for a CLI run against it). */
        url: t.url,
        app: (overrides: Partial<IngestDeps> = {}): Express =>
          ingestApp({ db: t.db, redis, ...deps, ...overrides }),
        async close(): Promise<void> {
          redis.disconnect();
          await t.drop();
        },
      };
    },
    (fixture) => fixture.close(),
  );
}

export async function setWebhook(db: Db, botId: string, url = "http://127.0.0.1:9/hook"): Promise<void> {
  await db.pool.query("UPDATE bots SET webhook_url = $2 WHERE id = $1", [botId, url]);
}

export interface DeliveryRow {
  id: string;
  state: string;
  attempts_made: number;
  next_attempt_at: Date;
  handed_off_at: Date | null;
  created_at: Date;
}

export async function deliveriesOf(db: Db, botId: string): Promise<DeliveryRow[]> {
  const { rows } = await db.pool.query<DeliveryRow>(
    `SELECT id, state, attempts_made, next_attempt_at, handed_off_at, created_at
       FROM webhook_deliveries WHERE bot_id = $1 ORDER BY created_at, id`,
    [botId],
  );
  return rows;
}

export async function logCount(db: Db, botId: string, userId?: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM vote_log WHERE bot_id = $1 AND ($2::text IS NULL OR user_id = $2)",
    [botId, userId ?? null],
  );
  return rows[0]?.n ?? 0;
}
