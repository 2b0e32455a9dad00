/**
 * `botctl webhook redeliver <id> <deliveryId>`: the same service function as the internal endpoint,
 * so the fresh series is handed to the queue (or, when Redis is unavailable, left to the relay).
 */
import type { Db, SecretBox } from "@botdir/db";
import type { RedeliverResponse } from "@botdir/schema";
import { systemClock } from "@botdir/service-kit";
import { createListings } from "../services/listings.js";
import { withCliQueue } from "./cli-queue.js";

export interface RedeliverCliDeps {
  db: Db;
  redisUrl: string;
  /** REDIS_CLUSTER_NODES: the queue is on a Redis Cluster. */
  redisClusterNodes?: string | undefined;
  secretBox: SecretBox | null;
  /** BullMQ key prefix; DEFAULT_QUEUE_PREFIX outside tests. */
  queuePrefix?: string;
}

export async function redeliverFromCli(
  deps: RedeliverCliDeps,
  botId: string,
  deliveryId: string,
): Promise<RedeliverResponse> {
  return withCliQueue(deps, (deliveryQueue) =>
    createListings({ db: deps.db, clock: systemClock, secretBox: deps.secretBox, deliveryQueue }).redeliver(
      botId,
      deliveryId,
    ),
  );
}
