/** Shared fixtures of the fault tests: app environments, webhook bots, delivery rows. */
import { createSecretBox, type Db } from "@botdir/db";
import { directUrlOf, seedBot, testRedisClusterNodes, testRedisUrl } from "@botdir/db/testing";
import { call } from "./processes.js";

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
