/**
 * The producer side of the delivery queue. PostgreSQL holds the truth (the outbox row); a BullMQ job
 * is only a nudge for the dispatcher, so handing off never blocks or fails a vote: when Redis is
 * unavailable the add is skipped at once and the outbox relay hands the delivery off later.
 */
import type { Db } from "@botdir/db";
import {
  type DeliveryHandOff,
  deliveryJobOptions,
  describeError,
  type Logger,
  QUEUES,
  withTimeout,
} from "@botdir/schema";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";

export interface DeliveryQueueOptions {
  db: Db;
  /**
   * A connection owned by the caller, created fail-fast: `enableOfflineQueue: false` and a small
   * `maxRetriesPerRequest`, so an add fails immediately while Redis is down instead of queueing.
   */
  redis: Redis;
  /** BullMQ key prefix: DEFAULT_QUEUE_PREFIX in production, testRedisPrefix()-based in tests. */
  prefix: string;
  logger: Logger;
  /** Upper bound of one add, in case Redis accepts the connection but does not answer. */
  addTimeoutMs?: number;
  /** How long request-path hand-offs are gathered before handed_off_at is written in one UPDATE. */
  markBatchMs?: number;
}

export interface DeliveryQueue {
  /** Adds one job per delivery (jobId = delivery id). True when Redis took them all; never throws. */
  add(deliveries: readonly DeliveryHandOff[], now: Date): Promise<boolean>;
  /**
   * The after-commit hand-off of the request path: add, and on success record handed_off_at
   * (batched; a lost mark only means the relay adds the job again, which is a no-op).
   */
  handOff(delivery: DeliveryHandOff, now: Date): Promise<boolean>;
  /** False while the Redis connection is not usable; callers skip the work instead of waiting. */
  isReady(): boolean;
  /** Writes pending handed_off_at marks now. */
  flush(): Promise<void>;
  /** Flushes the marks and closes the Queue (the Redis connection stays the caller's). */
  close(): Promise<void>;
  /** The BullMQ queue, for inspection (tests, metrics). */
  readonly queue: Queue;
}

const JOB_NAME = "vote.create";

export function createDeliveryQueue(options: DeliveryQueueOptions): DeliveryQueue {
  const { db, redis, logger } = options;
  const addTimeoutMs = options.addTimeoutMs ?? 1_000;
  const markBatchMs = options.markBatchMs ?? 20;
  // skipWaitingForReady + skipVersionCheck: the Queue must not wait for (or query) Redis when it
  // is created, or every add would hang until Redis came back.
  const queue = new Queue(QUEUES.webhookDeliveries, {
    connection: redis,
    prefix: options.prefix,
    skipWaitingForReady: true,
    skipVersionCheck: true,
  });
  queue.on("error", () => {}); // connection errors surface as failed adds; the relay logs outages

  let marks: { id: string; at: Date }[] = [];
  let markTimer: NodeJS.Timeout | undefined;
  let flushing: Promise<void> = Promise.resolve();

  async function writeMarks(batch: { id: string; at: Date }[]): Promise<void> {
    if (batch.length === 0) return;
    try {
      await db.pool.query(
        `UPDATE webhook_deliveries AS d SET handed_off_at = m.at
           FROM unnest($1::uuid[], $2::timestamptz[]) AS m(id, at)
          WHERE d.id = m.id AND (d.handed_off_at IS NULL OR d.handed_off_at < m.at)`,
        [batch.map((m) => m.id), batch.map((m) => m.at.toISOString())],
      );
    } catch (error) {
      logger.warn({ err: describeError(error), count: batch.length }, "could not record hand-off");
    }
  }

  function flush(): Promise<void> {
    if (markTimer) clearTimeout(markTimer);
    markTimer = undefined;
    const batch = marks;
    marks = [];
    flushing = flushing.then(() => writeMarks(batch));
    return flushing;
  }

  async function add(deliveries: readonly DeliveryHandOff[], now: Date): Promise<boolean> {
    if (deliveries.length === 0) return true;
    if (redis.status !== "ready") return false;
    try {
      await withTimeout(
        queue.addBulk(
          deliveries.map((d) => ({
            name: JOB_NAME,
            data: { deliveryId: d.id },
            opts: deliveryJobOptions(d, now),
          })),
        ),
        addTimeoutMs,
      );
      return true;
    } catch {
      return false;
    }
  }

  return {
    queue,
    add,
    isReady: () => redis.status === "ready",
    async handOff(delivery, now) {
      const ok = await add([delivery], now);
      if (ok) {
        marks.push({ id: delivery.id, at: now });
        markTimer ??= setTimeout(() => void flush(), markBatchMs);
      }
      return ok;
    },
    flush,
    async close() {
      await flush();
      await queue.close();
    },
  };
}
