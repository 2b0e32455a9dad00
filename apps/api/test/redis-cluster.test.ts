/**
 * The API on a Redis Cluster (REDIS_CLUSTER_NODES): the limiter's batched Lua call and the page
 * cache's batched DEL touch keys of many hash slots, which a Cluster refuses in one command
 * (CROSSSLOT); both are split per slot. A fault proxy in front of every node lets one master be
 * slowed.
 */
import { randomBytes } from "node:crypto";
import { hashToken } from "@botdir/db";
import { seedBot, useForFile } from "@botdir/db/testing";
import { createRedis, groupBySlot, redisTargetOf, systemClock } from "@botdir/service-kit";
import { redisReady } from "@botdir/service-kit/testing";
import { startRedisCluster } from "@botdir/test-stores";
import { createCaches } from "../src/services/cache.js";
import { createRateLimiter } from "../src/services/ratelimit.js";
import { CapturingLogger, checkVote, useHarness } from "./support.js";

const { h } = useHarness();

/** A private Redis Cluster and the apps' fail-fast client of it, ready for commands. */
const shared = useForFile(
  "the Redis Cluster",
  async () => {
    const cluster = await startRedisCluster({ proxied: true });
    const redis = createRedis(
      redisTargetOf({ REDIS_URL: "redis://unused", REDIS_CLUSTER_NODES: cluster.nodes }),
      "fail-fast",
    );
    try {
      await redisReady(redis, 30_000);
    } catch (error) {
      redis.disconnect();
      await cluster.stop();
      throw error;
    }
    return { cluster, redis };
  },
  async ({ cluster, redis }) => {
    redis.disconnect();
    await cluster.stop();
  },
  120_000,
);

describe("rate limits on a Redis Cluster", () => {
  it("when 40 tokens (keys on many slots) are checked in one batch, then every one is counted (none fails open) and each key holds its own count", async () => {
    const { redis } = shared;
    const logger = new CapturingLogger();
    const app = h.app({ redis, logger });
    const bots = await Promise.all(Array.from({ length: 40 }, () => seedBot(h.t.db)));
    const keys = bots.map((b) => `${h.prefix}rl:check:${hashToken(b.token as string)}`);
    // The batch really spans several slots: one Lua call would be refused with CROSSSLOT.
    expect(groupBySlot(redis, keys).length).toBeGreaterThan(1);

    const answers = await Promise.all(bots.map((b) => checkVote(app, b)));
    expect(answers.map((r) => r.status)).toEqual(bots.map(() => 200));
    expect(answers.map((r) => r.headers["ratelimit-remaining"])).toEqual(bots.map(() => "599"));
    expect(logger.events("rate_limit_fail_open")).toEqual([]);
    const counts = await Promise.all(keys.map((k) => redis.get(k)));
    expect(counts).toEqual(keys.map(() => "1"));
  });

  it("when one master answers later than the deadline, then only the keys of its slots are counted locally and the other keys of the same batch in Redis", async () => {
    const { cluster, redis } = shared;
    const logger = new CapturingLogger();
    const limiter = createRateLimiter({
      redis,
      prefix: h.prefix,
      timeoutMs: 1_000,
      logger,
      clock: systemClock,
    });
    const hashes = Array.from({ length: 40 }, () => randomBytes(32).toString("hex"));
    const masters = await Promise.all(hashes.map((k) => cluster.masterOf(`${h.prefix}rl:check:${k}`)));
    const slow = masters[0] as number;
    expect(new Set(masters).size).toBeGreaterThan(1);
    const proxy = cluster.proxies[cluster.ports.indexOf(slow)];
    if (!proxy) throw new Error(`no proxy in front of ${slow}`);

    proxy.setDelay(3_000);
    try {
      // One event-loop turn: one batch, one Lua call per slot.
      const decisions = await Promise.all(hashes.map((k) => limiter.consume("check", k)));
      expect(decisions.map((d) => ("local" in d ? "local" : d.kind))).toEqual(
        masters.map((m) => (m === slow ? "local" : "allowed")),
      );
    } finally {
      proxy.setDelay(0);
      // Behind the late answers on the same connection: resolves once they have all come.
      await redis.get(`${h.prefix}rl:check:${hashes[0]}`);
    }
    expect(logger.events("rate_limit_local_fallback")).toHaveLength(1);
    expect(logger.events("rate_limit_fail_open")).toEqual([]);
  });

  it("when a token sends 601 checks, then the 601st is refused with 429", async () => {
    const app = h.app({ redis: shared.redis, logger: new CapturingLogger() });
    const bot = await seedBot(h.t.db);
    const statuses: number[] = [];
    for (let round = 0; round < 601; round += 50) {
      const batch = Math.min(50, 601 - round);
      const answers = await Promise.all(Array.from({ length: batch }, () => checkVote(app, bot)));
      statuses.push(...answers.map((r) => r.status));
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(600);
    expect(statuses.filter((s) => s === 429)).toHaveLength(1);
  });
});

describe("page cache invalidation on a Redis Cluster", () => {
  it("when the pages of 30 bots (keys on many slots) are invalidated in one batch, then every key is deleted", async () => {
    const { redis } = shared;
    const caches = createCaches({ redis, prefix: h.prefix, logger: new CapturingLogger() });
    const ids = Array.from({ length: 30 }, (_, i) => `1000000000000000${String(i).padStart(2, "0")}`);
    await Promise.all(ids.map((id) => redis.set(caches.pageKey(id), "<html>")));
    expect(groupBySlot(redis, ids.map(caches.pageKey)).length).toBeGreaterThan(1);

    await Promise.all(ids.map((id) => caches.invalidatePage(id)));

    const left = await Promise.all(ids.map((id) => redis.exists(caches.pageKey(id))));
    expect(left).toEqual(ids.map(() => 0));
  });
});
