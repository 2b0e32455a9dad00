/**
 * The full stack of the end-to-end tests (startStack: keys, a database, Redis, a receiver, the apps
 * as processes, one teardown) and its fixtures: app environments, webhook bots, delivery rows.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { createSecretBox, type Db } from "@botdir/db";
import {
  createTestDatabase,
  directUrlOf,
  randomUserId,
  seedBot,
  type TestDatabase,
  testRedisClusterNodes,
  testRedisPrefix,
  testRedisUrl,
  useForFile,
} from "@botdir/db/testing";
import { createRedis, type RedisClient, type RedisRole, redisTargetOf } from "@botdir/service-kit";
import { redisReady, waitFor } from "@botdir/service-kit/testing";
import { type PrivateRedis, startRedisServer } from "@botdir/test-stores";
import { type AppName, type AppProcess, call, freshKeys, REPO_ROOT, startApp, stopAll } from "./processes.js";
import { type ReceivedRequest, type Receiver, type Reply, startReceiver } from "./receivers.js";

export interface StackKeys {
  encryptionKey: Buffer;
  encryptionKeyHex: string;
  internalKey: string;
}

/** Environment for all three apps: fast relay, fast retries, short locks, private targets allowed. */
export function appEnv(
  input: { databaseUrl: string; redisUrl: string; keys: StackKeys },
  overrides: Record<string, string> = {},
): Record<string, string> {
  // A distributed run (`pnpm test:distributed`) puts the shared stores behind PgBouncer and on a
  // Redis Cluster; a test's private Redis (to stop or kill) stays a single server.
  const clusterNodes = input.redisUrl === testRedisUrl() ? testRedisClusterNodes() : undefined;
  const env: Record<string, string> = {
    DATABASE_URL: input.databaseUrl,
    DATABASE_DIRECT_URL: directUrlOf(input.databaseUrl),
    REDIS_URL: input.redisUrl,
    ...(clusterNodes ? { REDIS_CLUSTER_NODES: clusterNodes } : {}),
    INTERNAL_API_KEY: input.keys.internalKey,
    SECRET_ENCRYPTION_KEY: input.keys.encryptionKeyHex,
    WEBHOOK_ALLOW_PRIVATE_TARGETS: "true",
    WEBHOOK_TIMEOUT_MS: "2000",
    WEBHOOK_RETRY_DELAYS_MS: "100,100,100,100",
    OUTBOX_RELAY_INTERVAL_MS: "200",
    RECOVERY_INTERVAL_MS: "200",
    OUTBOX_STALE_MS: "1000",
    DISPATCHER_LOCK_DURATION_MS: "1000",
    DISPATCHER_STALLED_INTERVAL_MS: "500",
    DISPATCHER_CONCURRENCY: "10",
    DB_POOL_MAX: "5",
    ...overrides,
  };
  // A test must never weaken TLS checks of the dispatcher by accident.
  env.NODE_TLS_REJECT_UNAUTHORIZED = "1";
  return env;
}

/** An approved bot with a token and a webhook pointing at `url`, its secret encrypted as ingest does. */
export async function seedWebhookBot(db: Db, keys: StackKeys, url: string, secret = "whsec_test_secret") {
  const bot = await seedBot(db);
  await db.prisma.bot.update({
    where: { id: bot.id },
    data: { webhookUrl: url, webhookSecretEncrypted: createSecretBox(keys.encryptionKey).encrypt(secret) },
  });
  return { id: bot.id, token: bot.token ?? "", secret };
}

export async function castVote(ingestBase: string, internalKey: string, botId: string, userId: string) {
  return call(`${ingestBase}/internal/v1/votes`, {
    method: "POST",
    headers: { authorization: internalKey },
    body: { bot_id: botId, user_id: userId },
  });
}

export async function deliveriesOf(db: Db, botId: string) {
  return db.prisma.delivery.findMany({ where: { botId }, orderBy: { createdAt: "asc" } });
}

export async function attemptsOf(db: Db, deliveryId: string) {
  return db.prisma.attempt.findMany({ where: { deliveryId }, orderBy: { attemptNumber: "asc" } });
}

export interface StackOptions {
  /** Processes of each app to start (default one of each; 0 leaves an app out). */
  replicas?: Partial<Record<AppName, number>>;
  /** Environment of every app, on top of appEnv's. */
  env?: Record<string, string>;
  /** Environment of one app's processes, on top of `env`. */
  appEnv?: Partial<Record<AppName, Record<string, string>>>;
  /**
   * A redis-server of the test's own (to stop, kill or restart) instead of the shared Redis under a
   * key prefix of its own (default false).
   */
  privateRedis?: boolean;
  /** How the stack's receiver answers (default 204). */
  reply?: (req: ReceivedRequest, n: number) => Reply;
  /** Run the apps' build output (`dist/main.js`, as the images do; build first) instead of src. */
  dist?: boolean;
}

export interface Stack {
  keys: ReturnType<typeof freshKeys>;
  t: TestDatabase;
  db: Db;
  /** The private Redis (privateRedis: true); throws on the shared one. */
  redis: PrivateRedis;
  redisUrl: string;
  /** The environment the apps were started with (appEnv plus `env`). */
  env: Record<string, string>;
  receiver: Receiver;
  /** Every process started, per app, in start order. */
  processes: Record<AppName, AppProcess[]>;
  /** The first process of each app; throws for an app the stack did not start. */
  api: AppProcess;
  ingest: AppProcess;
  dispatcher: AppProcess;
  /**
   * An approved bot whose token every API process is seen to accept: a `/check` with the token,
   * straight to each API process, not refused. seedBot alone would do: an API waits for its token
   * set's barrier before refusing a token the set does not hold, so a token committed before its
   * first request is accepted by every process (docs/operations.md, the token set); this is a
   * positive check of it before the test starts.
   */
  knownBot(): ReturnType<typeof seedBot>;
  /** An approved bot with a token and a webhook at `url` (seedWebhookBot on the stack's keys). */
  webhookBot(url: string, secret?: string): ReturnType<typeof seedWebhookBot>;
  /** A vote cast on the stack's first vote-ingest with its internal key. */
  vote(botId: string, userId: string): ReturnType<typeof castVote>;
  deliveries(botId: string): ReturnType<typeof deliveriesOf>;
  attempts(deliveryId: string): ReturnType<typeof attemptsOf>;
  /** Starts one more process of `app` with the stack's environment (plus `extra`). */
  start(app: AppName, extra?: Record<string, string>): Promise<AppProcess>;
  /** Kills every process, then the receiver, the private Redis and the database. */
  stop(): Promise<void>;
}

/**
 * This test file's stack: started before its tests (beforeAll, with a deadline for a loaded
 * machine) and stopped after them (afterAll); read it inside tests.
 */
export function useStack(options: StackOptions = {}): Stack {
  return useForFile(
    "the stack",
    () => startStack(options),
    (stack) => stack.stop(),
    180_000,
  );
}

const APPS: AppName[] = ["api", "vote-ingest", "webhook-dispatcher"];

/** Starts the full stack; call `stop()` in afterAll. */
export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const keys = freshKeys();
  const [t, redis, receiver] = await Promise.all([
    createTestDatabase(),
    options.privateRedis ? startRedisServer() : Promise.resolve(null),
    startReceiver(options.reply),
  ]);
  const redisUrl = redis?.url ?? testRedisUrl();
  const env = appEnv(
    { databaseUrl: t.url, redisUrl, keys },
    // On the shared Redis, the queue under a prefix of its own (a hash tag, as on a Redis Cluster).
    { ...(redis ? {} : { QUEUE_PREFIX: `{${testRedisPrefix().slice(0, -1)}}` }), ...options.env },
  );
  if (options.dist) {
    const missing = APPS.filter((app) => !existsSync(join(REPO_ROOT, "apps", app, "dist", "main.js")));
    if (missing.length > 0)
      throw new Error(`no dist/main.js in ${missing.join(", ")}: run \`pnpm build\` first`);
  }
  const processes: Record<AppName, AppProcess[]> = { api: [], "vote-ingest": [], "webhook-dispatcher": [] };
  const start = async (app: AppName, extra: Record<string, string> = {}) => {
    const proc = await startApp(
      app,
      { ...env, ...options.appEnv?.[app], ...extra },
      { dist: options.dist === true },
    );
    processes[app].push(proc);
    return proc;
  };
  const stop = async () => {
    await stopAll();
    await redis?.kill();
    await receiver.close();
    await t.drop();
  };
  try {
    await Promise.all(
      APPS.flatMap((app) => Array.from({ length: options.replicas?.[app] ?? 1 }, () => start(app))),
    );
  } catch (error) {
    await stop();
    throw error;
  }
  const first = (app: AppName) => {
    const proc = processes[app][0];
    if (!proc) throw new Error(`the stack runs no ${app}`);
    return proc;
  };
  return {
    keys,
    t,
    db: t.db,
    get redis() {
      if (!redis) throw new Error("the stack runs on the shared Redis (privateRedis: false)");
      return redis;
    },
    redisUrl,
    env,
    receiver,
    processes,
    get api() {
      return first("api");
    },
    get ingest() {
      return first("vote-ingest");
    },
    get dispatcher() {
      return first("webhook-dispatcher");
    },
    async knownBot() {
      const bot = await seedBot(t.db);
      for (const api of processes.api) {
        await waitFor(async () => {
          const res = await fetch(`${api.base}/api/v1/bots/${bot.id}/check?userId=${randomUserId()}`, {
            headers: { authorization: bot.token ?? "" },
          });
          await res.arrayBuffer();
          return res.status === 200;
        }, `API ${api.base} to accept bot ${bot.id}'s new token`);
      }
      return bot;
    },
    webhookBot: (url, secret) => seedWebhookBot(t.db, keys, url, secret),
    vote: (botId, userId) => castVote(first("vote-ingest").base, keys.internalKey, botId, userId),
    deliveries: (botId) => deliveriesOf(t.db, botId),
    attempts: (deliveryId) => attemptsOf(t.db, deliveryId),
    start,
    stop,
  };
}

/**
 * A connection to the shared Redis as the apps make it for `role` (default fail-fast; "worker" for
 * an in-process dispatcher): the Redis Cluster in a distributed run (`pnpm test:distributed`), the
 * single server otherwise. Ready when returned.
 */
export async function connectSharedRedis(role: RedisRole = "fail-fast"): Promise<RedisClient> {
  const client = createRedis(
    redisTargetOf({ REDIS_URL: testRedisUrl(), REDIS_CLUSTER_NODES: testRedisClusterNodes() }),
    role,
  );
  await redisReady(client);
  return client;
}

/**
 * The stores of a test that runs apps in-process: its own database (TestDatabase's fields and
 * drop) and a fail-fast connection to the shared Redis, ready, with a key prefix of its own.
 */
export interface TestStores extends TestDatabase {
  redis: RedisClient;
  prefix: string;
  /** Disconnects Redis and drops the database. */
  close(): Promise<void>;
}

/**
 * This test file's stores (startStores): created before its tests and closed after them, once the
 * steps given to `beforeClose` (a queue on its Redis, a server) have run, the last given first.
 * Read it inside tests and hooks.
 */
export function useStores(): TestStores & { beforeClose(step: () => unknown): void } {
  const steps: (() => unknown)[] = [];
  const stores = useForFile("the stores", startStores, async (started) => {
    for (const step of steps.reverse()) await step();
    await started.close();
  });
  const beforeClose = (step: () => unknown) => void steps.push(step);
  // The stores' fields come from `stores` (read inside tests); beforeClose works at any time.
  return Object.assign(Object.create(stores) as TestStores, { beforeClose });
}

export async function startStores(): Promise<TestStores> {
  const [t, redis] = await Promise.all([createTestDatabase(), connectSharedRedis()]);
  return {
    ...t,
    redis,
    prefix: testRedisPrefix(),
    async close() {
      redis.disconnect();
      await t.drop();
    },
  };
}
