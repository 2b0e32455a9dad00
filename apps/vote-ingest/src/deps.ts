import type { BatchLimits } from "@botdir/batcher";
import type { Db, SecretBox } from "@botdir/db";
import type { Clock, Logger, RedisClient } from "@botdir/service-kit";
import type { Resolver } from "@botdir/webhook-targets";
import type { IngestMetrics } from "./metrics.js";
import type { DeliveryQueue } from "./outbox/queue.js";

/** What createApp takes: passed in so tests build the app on their own database, Redis and clock. */
export interface IngestDeps {
  db: Db;
  redis: RedisClient;
  clock: Clock;
  logger: Logger;
  internalApiKey: string;
  /** Producer of webhook delivery jobs; without it every delivery waits for the outbox relay. */
  deliveryQueue?: DeliveryQueue;
  /** Encrypts webhook secrets at rest (SECRET_ENCRYPTION_KEY); without it a webhook cannot be set. */
  secretBox?: SecretBox | null;
  /** WEBHOOK_ALLOW_PRIVATE_TARGETS: http and private webhook hosts allowed (development, tests). */
  allowPrivateTargets?: boolean;
  /**
   * Resolves webhook host names when a URL is set (default: the asynchronous resolver of
   * @botdir/webhook-targets; null skips DNS).
   */
  webhookResolver?: Resolver | null;
  /** WEBHOOK_SECRET_OVERLAP_MS: a rotated-out secret keeps signing this long (default 24 h). */
  webhookSecretOverlapMs?: number;
  /** Test events (POST …/webhook/test) per bot per minute (default 5). */
  webhookTestsPerMinute?: number;
  /** WEBHOOK_DNS_TIMEOUT_MS: deadline of that lookup (default 3 s). */
  webhookDnsTimeoutMs?: number;
  /** Prometheus series of this app instance, served at GET /metrics (default: a fresh registry). */
  metrics?: IngestMetrics;
  /** Vote-casting statements in flight and votes per statement (default DEFAULT_BATCH_LIMITS). */
  batching?: BatchLimits;
}
