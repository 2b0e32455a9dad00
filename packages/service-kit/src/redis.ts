/// <reference path="./cluster-key-slot.d.ts" />
/**
 * The apps' Redis connections: one ioredis client per role, a single server (`REDIS_URL`) or a
 * Redis Cluster (`REDIS_CLUSTER_NODES`). Code that sends a command touching several keys groups
 * them by hash slot first (`groupBySlot`), so the same call works on both.
 */
import calculateSlot from "cluster-key-slot";
import { Cluster, type ClusterNode, type ClusterOptions, Redis, type RedisOptions } from "ioredis";

/**
 * ioredis options of every connection that must fail at once while Redis is down rather than
 * queue commands and hang (queue producers, the API's limiter and caches, scrape-time reads): no
 * offline queue, one retry, a 2 s connect timeout. Never for a BullMQ worker connection, which
 * needs `maxRetriesPerRequest: null`.
 */
export const FAIL_FAST_REDIS = {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 1,
  connectTimeout: 2_000,
} as const;

/** A single-server client or a Cluster client: both take the same commands. */
export type RedisClient = Redis | Cluster;

/**
 * What a connection is for.
 * - `fail-fast`: producers, the limiter, caches and scrape-time reads: no offline queue, so a
 *   command fails at once while Redis (or a slot's master) is unreachable instead of hanging.
 * - `worker`: a BullMQ worker's connection: `maxRetriesPerRequest: null` (BullMQ's requirement),
 *   commands wait for a reconnect. Never auto-pipelined (blocking commands and Lua scripts must
 *   not queue behind each other).
 */
export type RedisRole = "fail-fast" | "worker";

export interface RedisTarget {
  /** `redis://` or `rediss://` URL of a single server; used when `clusterNodes` is absent. */
  url: string;
  /** Seed nodes of a Redis Cluster; when present every connection is an ioredis Cluster. */
  clusterNodes?: ClusterNode[] | undefined;
}

/** `host:port,host:port,…` (REDIS_CLUSTER_NODES) as ioredis seed nodes; null when malformed. */
export function parseClusterNodes(value: string): ClusterNode[] | null {
  const nodes: ClusterNode[] = [];
  for (const part of value.split(",")) {
    const match = /^\s*(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})\s*$/.exec(part);
    const port = Number(match?.[2]);
    if (!match?.[1] || !Number.isInteger(port) || port < 1 || port > 65_535) return null;
    nodes.push({ host: match[1].replace(/^\[|\]$/g, ""), port });
  }
  return nodes.length > 0 ? nodes : null;
}

function roleOptions(role: RedisRole): RedisOptions {
  return role === "worker"
    ? { maxRetriesPerRequest: null, enableAutoPipelining: false }
    : { ...FAIL_FAST_REDIS, enableAutoPipelining: false };
}

/**
 * A connection for `role`, to the single server or the Cluster of `target`. `extra` adds ioredis
 * options (e.g. `lazyConnect`). An `error` listener is attached: the client reconnects by itself
 * and health checks report the state, so a connection error is never an unhandled event.
 */
export function createRedis(target: RedisTarget, role: RedisRole, extra: RedisOptions = {}): RedisClient {
  const options = { ...roleOptions(role), ...extra };
  let client: RedisClient;
  if (target.clusterNodes && target.clusterNodes.length > 0) {
    const { enableOfflineQueue, enableAutoPipelining, lazyConnect, ...perNode } = options;
    const clusterOptions: ClusterOptions = {
      redisOptions: perNode,
      // The cluster client's own queue: off for fail-fast roles, so a command for a slot whose
      // master is down fails instead of waiting for the cluster to heal.
      enableOfflineQueue: enableOfflineQueue ?? true,
      enableAutoPipelining: enableAutoPipelining ?? false,
      ...(lazyConnect === undefined ? {} : { lazyConnect }),
      // Re-read the slot map soon after a master fails or returns.
      slotsRefreshTimeout: 2_000,
      clusterRetryStrategy: (times) => Math.min(100 * times, 2_000),
      // A fail-fast command whose node is gone is not redirected and retried for seconds.
      ...(role === "fail-fast" ? { retryDelayOnClusterDown: 100, maxRedirections: 4 } : {}),
    };
    client = new Cluster(target.clusterNodes, clusterOptions);
  } else {
    client = new Redis(target.url, options);
  }
  client.on("error", () => {});
  return client;
}

/** True when `client` is a Cluster client (multi-key commands must stay inside one slot). */
export function isCluster(client: RedisClient): client is Cluster {
  return client instanceof Cluster;
}

/**
 * The indexes of `keys`, grouped so that each group's keys share a hash slot when `client` is a
 * Cluster (one group per slot, in order of first appearance), or all in one group otherwise.
 */
export function groupBySlot(client: RedisClient, keys: readonly string[]): number[][] {
  if (!isCluster(client)) return keys.length > 0 ? [keys.map((_, i) => i)] : [];
  const groups = new Map<number, number[]>();
  keys.forEach((key, i) => {
    const slot = calculateSlot(key);
    const group = groups.get(slot);
    if (group) group.push(i);
    else groups.set(slot, [i]);
  });
  return [...groups.values()];
}
