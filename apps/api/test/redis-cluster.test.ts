/**
 * The API on a Redis Cluster (REDIS_CLUSTER_NODES): the limiter's batched Lua call and the page
 * cache's batched DEL touch keys of many hash slots, which a Cluster refuses in one command
 * (CROSSSLOT); both are split per slot.
 */
import { hashToken } from "@botdir/db";
import { type PrivateRedisCluster, seedBot, startRedisCluster } from "@botdir/db/testing";
import { createRedis, groupBySlot, type RedisClient } from "@botdir/service-kit";
import request from "supertest";
import { createApp } from "../src/app.js";
import { createCaches } from "../src/services/cache.js";
import { CapturingLogger, createHarness, type Harness, USER } from "./support.js";

let h: Harness;
let cluster: PrivateRedisCluster;
let redis: RedisClient;

beforeAll(async () => {
  h = await createHarness();
  cluster = await startRedisCluster();
  redis = createRedis(
    { url: "redis://unused", clusterNodes: cluster.nodes.split(",").map(toNode) },
    "fail-fast",
  );
  await waitReady(redis);
}, 120_000);

afterAll(async () => {
  redis?.disconnect();
  await cluster?.stop();
  await h?.close();
});

function toNode(hostPort: string) {
  const [host, port] = hostPort.split(":");
  return { host: host as string, port: Number(port) };
}

async function waitReady(client: RedisClient): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (client.status !== "ready") {
    if (Date.now() > deadline) throw new Error(`cluster client never became ready (${client.status})`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe("rate limits on a Redis Cluster", () => {
  it("when 40 tokens (keys on many slots) are checked in one batch, then every one is counted (none fails open) and each key holds its own count", async () => {
    const logger = new CapturingLogger();
    const app = createApp({
      db: h.t.db,
      redis,
      clock: h.clock,
      logger,
      redisPrefix: h.prefix,
      limiterTimeoutMs: 2_000,
    });
    const bots = await Promise.all(Array.from({ length: 40 }, () => seedBot(h.t.db)));
    const keys = bots.map((b) => `${h.prefix}rl:check:${hashToken(b.token as string)}`);
    // The batch really spans several slots: one Lua call would be refused with CROSSSLOT.
    expect(groupBySlot(redis, keys).length).toBeGreaterThan(1);

    const answers = await Promise.all(
      bots.map((b) =>
        request(app)
          .get(`/api/v1/bots/${b.id}/check`)
          .query({ userId: USER })
          .set("Authorization", b.token as string),
      ),
    );
    expect(answers.map((r) => r.status)).toEqual(bots.map(() => 200));
    expect(answers.map((r) => r.headers["ratelimit-remaining"])).toEqual(bots.map(() => "599"));
    expect(logger.events("rate_limit_fail_open")).toEqual([]);
    const counts = await Promise.all(keys.map((k) => redis.get(k)));
    expect(counts).toEqual(keys.map(() => "1"));
  });

  it("when a token sends 601 checks, then the 601st is refused with 429", async () => {
    const app = createApp({
      db: h.t.db,
      redis,
      clock: h.clock,
      logger: new CapturingLogger(),
      redisPrefix: h.prefix,
      limiterTimeoutMs: 2_000,
    });
    const bot = await seedBot(h.t.db);
    const statuses: number[] = [];
    for (let round = 0; round < 601; round += 50) {
      const batch = Math.min(50, 601 - round);
      const answers = await Promise.all(
        Array.from({ length: batch }, () =>
          request(app)
            .get(`/api/v1/bots/${bot.id}/check`)
            .query({ userId: USER })
            .set("Authorization", bot.token as string),
        ),
      );
      statuses.push(...answers.map((r) => r.status));
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(600);
    expect(statuses.filter((s) => s === 429)).toHaveLength(1);
  });
});

describe("page cache invalidation on a Redis Cluster", () => {
  it("when the pages of 30 bots (keys on many slots) are invalidated in one batch, then every key is deleted", async () => {
    const caches = createCaches({ redis, prefix: h.prefix, logger: new CapturingLogger() });
    const ids = Array.from({ length: 30 }, (_, i) => `1000000000000000${String(i).padStart(2, "0")}`);
    await Promise.all(ids.map((id) => redis.set(caches.pageKey(id), "<html>")));
    expect(groupBySlot(redis, ids.map(caches.pageKey)).length).toBeGreaterThan(1);

    await Promise.all(ids.map((id) => caches.invalidatePage(id)));

    const left = await Promise.all(ids.map((id) => redis.exists(caches.pageKey(id))));
    expect(left).toEqual(ids.map(() => 0));
  });
});
