import { Cluster, Redis } from "ioredis";
import { z } from "zod";
import { databaseOf, EnvFields, parseEnv, redisTargetOf } from "./env.js";
import { createRedis, groupBySlot, parseClusterNodes } from "./redis.js";

const Env = z.object({
  DATABASE_URL: EnvFields.DATABASE_URL,
  DATABASE_DIRECT_URL: EnvFields.DATABASE_DIRECT_URL,
  DB_PREPARED_STATEMENTS: EnvFields.DB_PREPARED_STATEMENTS,
  DB_POOL_MAX: EnvFields.DB_POOL_MAX,
  DB_CONNECT_TIMEOUT_MS: EnvFields.DB_CONNECT_TIMEOUT_MS,
  REDIS_URL: EnvFields.REDIS_URL,
  REDIS_CLUSTER_NODES: EnvFields.REDIS_CLUSTER_NODES,
});

describe("REDIS_CLUSTER_NODES", () => {
  it("parses host:port pairs, IPv6 in brackets, spaces around commas", () => {
    expect(parseClusterNodes("10.0.0.1:7000, redis-1.internal:7001,[::1]:7002")).toEqual([
      { host: "10.0.0.1", port: 7000 },
      { host: "redis-1.internal", port: 7001 },
      { host: "::1", port: 7002 },
    ]);
  });

  it.each(["", "redis-1", "redis-1:", "redis-1:70000", "redis://a:1", "a:1,,b:2", "a:0"])(
    "does not parse %j",
    (value) => {
      expect(parseClusterNodes(value)).toBeNull();
    },
  );

  // (An empty variable counts as unset.)
  it.each(["redis-1", "redis-1:70000", "redis://a:1", "a:1,,b:2"])(
    "refuses %j at start with one line naming the variable",
    (value) => {
      expect(() => parseEnv(Env, { REDIS_CLUSTER_NODES: value })).toThrow(
        "Invalid environment: REDIS_CLUSTER_NODES must be host:port pairs separated by commas.",
      );
    },
  );

  it("when set, every connection is a Cluster client; when unset, a single-server client on REDIS_URL", () => {
    const clustered = createRedis(
      redisTargetOf(parseEnv(Env, { REDIS_CLUSTER_NODES: "127.0.0.1:1" })),
      "worker",
      {
        lazyConnect: true,
      },
    );
    const single = createRedis(redisTargetOf(parseEnv(Env, {})), "fail-fast", { lazyConnect: true });
    expect(clustered).toBeInstanceOf(Cluster);
    expect(single).toBeInstanceOf(Redis);
    expect((single as Redis).options.port).toBe(6379);
    expect((single as Redis).options.enableOfflineQueue).toBe(false);
    expect((clustered as Cluster).options.redisOptions?.maxRetriesPerRequest).toBeNull();
    clustered.disconnect();
    single.disconnect();
  });
});

describe("groupBySlot", () => {
  const cluster = new Cluster([{ host: "127.0.0.1", port: 1 }], { lazyConnect: true });
  const single = new Redis({ lazyConnect: true });
  afterAll(() => {
    cluster.disconnect();
    single.disconnect();
  });

  it("on a single server, keeps every key in one group", () => {
    expect(groupBySlot(single, ["a", "b", "c"])).toEqual([[0, 1, 2]]);
    expect(groupBySlot(single, [])).toEqual([]);
  });

  it("on a Cluster, groups keys by hash slot: a hash tag keeps keys together, other keys part", () => {
    // "{botdir}:x" and "{botdir}:y" share the tag's slot; "a" (15495) and "b" (3300) do not.
    expect(groupBySlot(cluster, ["{botdir}:x", "a", "{botdir}:y", "b", "a"])).toEqual([[0, 2], [1, 4], [3]]);
  });
});

describe("DATABASE_DIRECT_URL and DB_PREPARED_STATEMENTS", () => {
  it("default to DATABASE_URL and auto", () => {
    const db = databaseOf(parseEnv(Env, { DATABASE_URL: "postgresql://app@pgbouncer:6432/botdir" }));
    expect(db.directUrl).toBe("postgresql://app@pgbouncer:6432/botdir");
    expect(db.preparedStatements).toBe("auto");
  });

  it("take a direct URL and on/off; anything else is refused with one line", () => {
    const db = databaseOf(
      parseEnv(Env, {
        DATABASE_URL: "postgresql://app@pgbouncer:6432/botdir",
        DATABASE_DIRECT_URL: "postgresql://app@postgres:5432/botdir",
        DB_PREPARED_STATEMENTS: "off",
      }),
    );
    expect(db).toMatchObject({
      directUrl: "postgresql://app@postgres:5432/botdir",
      preparedStatements: "off",
    });
    expect(() => parseEnv(Env, { DB_PREPARED_STATEMENTS: "yes" })).toThrow(
      /^Invalid environment: DB_PREPARED_STATEMENTS /,
    );
    expect(() => parseEnv(Env, { DATABASE_DIRECT_URL: "mysql://x" })).toThrow(
      "Invalid environment: DATABASE_DIRECT_URL must be a postgresql:// URL.",
    );
  });
});
