/**
 * The delivery-queue producer of a one-shot botctl command: a fail-fast Redis connection (an
 * outage must not block the command; the outbox relay hands the delivery off later), the queue,
 * and both closed when `run` is done.
 */
import type { Db } from "@botdir/db";
import { DEFAULT_QUEUE_PREFIX } from "@botdir/schema";
import { createRedis, type Logger, redisTargetOf } from "@botdir/service-kit";
import { createDeliveryQueue, type DeliveryQueue } from "../outbox/queue.js";

/** Where a one-shot command's queue lives: REDIS_URL, or the Cluster of REDIS_CLUSTER_NODES. */
export interface CliQueueDeps {
  db: Db;
  redisUrl: string;
  redisClusterNodes?: string | undefined;
  queuePrefix?: string | undefined;
}

export const quiet: Logger = { info() {}, warn() {}, error() {} };

export async function withCliQueue<T>(
  deps: CliQueueDeps & { logger?: Logger | undefined },
  run: (queue: DeliveryQueue) => Promise<T>,
): Promise<T> {
  const redis = createRedis(
    redisTargetOf({ REDIS_URL: deps.redisUrl, REDIS_CLUSTER_NODES: deps.redisClusterNodes }),
    "fail-fast",
    { lazyConnect: true, retryStrategy: () => null },
  );
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
