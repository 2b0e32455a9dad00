/**
 * The delivery-queue producer of a one-shot botctl command: a fail-fast Redis connection (an
 * outage must not block the command; the outbox relay hands the delivery off later), the queue,
 * and both closed when `run` is done.
 */
import type { Db } from "@botdir/db";
import { DEFAULT_QUEUE_PREFIX } from "@botdir/schema";
import { FAIL_FAST_REDIS, type Logger } from "@botdir/service-kit";
import { Redis } from "ioredis";
import { createDeliveryQueue, type DeliveryQueue } from "../outbox/queue.js";

export const quiet: Logger = { info() {}, warn() {}, error() {} };

export async function withCliQueue<T>(
  deps: { db: Db; redisUrl: string; queuePrefix?: string | undefined; logger?: Logger | undefined },
  run: (queue: DeliveryQueue) => Promise<T>,
): Promise<T> {
  const redis = new Redis(deps.redisUrl, {
    ...FAIL_FAST_REDIS,
    lazyConnect: true,
    retryStrategy: () => null,
  });
  redis.on("error", () => {});
  await redis.connect().catch(() => {});
  const queue = createDeliveryQueue({
    db: deps.db,
    redis,
    prefix: deps.queuePrefix ?? DEFAULT_QUEUE_PREFIX,
    logger: deps.logger ?? quiet,
  });
  try {
    return await run(queue);
  } finally {
    await queue.close().catch(() => {});
    redis.disconnect();
  }
}
