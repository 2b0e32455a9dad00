/** Shared arrangement of the vote and outbox tests: an app on a test database and a test queue. */
import type { Db } from "@botdir/db";
import { testRedisPrefix } from "@botdir/db/testing";
import { type Logger, ManualClock, type RedisClient } from "@botdir/service-kit";
import { connectRedis, silentLogger } from "@botdir/service-kit/testing";
import type { Express } from "express";
import type { Redis } from "ioredis";
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
