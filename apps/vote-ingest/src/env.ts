import { DEFAULT_QUEUE_PREFIX, DELIVERY_BATCH_MAX } from "@botdir/schema";
import {
  checkClusterQueuePrefix,
  checkHttpTimeouts,
  checkKeyRing,
  dbConnectTimeout,
  EnvFields,
  loadEnvOrExit,
  parseEnv,
  ServiceEnvFields,
  telemetryEnvFields,
} from "@botdir/service-kit";
import { isDnsServerAddress } from "@botdir/webhook-targets";
import { z } from "zod";
import { DEFAULT_DELIVERY_JOB_BATCH_MAX } from "./outbox/queue.js";

/** How long a rotated-out webhook secret keeps signing beside the new one (default 24 h). */
const SecretOverlap = z.coerce
  .number()
  .int()
  .min(0)
  .max(30 * 86_400_000)
  .default(86_400_000);

/** Deadline of the DNS check of a webhook URL being saved (the dispatcher checks again). */
const DnsTimeout = z.coerce.number().int().min(50).max(60_000).default(3_000);
/** Nameservers for that check instead of /etc/resolv.conf's (comma-separated ip[:port]). */
const DnsServers = EnvFields.list(
  isDnsServerAddress,
  "must be comma-separated IP addresses (optionally :port)",
).optional();

export const IngestEnv = z
  .object({
    ...ServiceEnvFields,
    ...telemetryEnvFields("botdir-vote-ingest"),
    INGEST_PORT: EnvFields.port(3001),
    /** Key the site frontend sends to the internal endpoints; required outside tests. */
    INTERNAL_API_KEY: z
      .string()
      .min(16, "must be at least 16 characters")
      // Refused, not trimmed: a key read with a trailing newline (a Secret made from a file) would
      // otherwise lock out every internal call while the process looks healthy.
      .refine((v) => v === v.trim(), "must not start or end with whitespace (a trailing newline?)")
      .optional(),
    /** Key ring encrypting webhook secrets at rest: the first key encrypts, every key decrypts. */
    SECRET_ENCRYPTION_KEYS: EnvFields.encryptionKeys.optional(),
    /** A ring of one (the variable before the key ring); exclusive with SECRET_ENCRYPTION_KEYS. */
    SECRET_ENCRYPTION_KEY: EnvFields.encryptionKey.optional(),
    WEBHOOK_ALLOW_PRIVATE_TARGETS: EnvFields.boolean(false),
    WEBHOOK_DNS_TIMEOUT_MS: DnsTimeout,
    WEBHOOK_DNS_SERVERS: DnsServers,
    /** How often the outbox relay looks for deliveries to hand to the queue. */
    OUTBOX_RELAY_INTERVAL_MS: z.coerce.number().int().min(50).max(600_000).default(1_000),
    /** A pending delivery due this long ago without progress is handed off again (lost job). */
    OUTBOX_STALE_MS: z.coerce.number().int().min(1_000).max(86_400_000).default(60_000),
    /** Time between the recovery driver's ticks (docs/webhooks.md "Recovering undelivered votes"). */
    RECOVERY_INTERVAL_MS: z.coerce.number().int().min(50).max(600_000).default(250),
    /** Votes a recovery step looks at (one keyset batch, one short transaction). */
    RECOVERY_BATCH: z.coerce.number().int().min(1).max(10_000).default(100),
    /** Deliveries of one recovery pending at most; its next batch waits below it. */
    RECOVERY_MAX_IN_FLIGHT: z.coerce.number().int().min(1).max(100_000).default(100),
    /** Recovered deliveries the process queues a second at most, all its recoveries together. */
    RECOVERY_MAX_PER_SECOND: z.coerce.number().int().min(1).max(100_000).default(100),
    /** Time between the reminder scheduler's ticks (docs/webhooks.md "vote.available"). */
    REMINDER_INTERVAL_MS: z.coerce.number().int().min(50).max(600_000).default(2_000),
    /** Due vote.available reminders made into deliveries per statement. */
    REMINDER_BATCH: z.coerce.number().int().min(1).max(10_000).default(500),
    /** BullMQ key prefix; must be the dispatcher's QUEUE_PREFIX. */
    QUEUE_PREFIX: z.string().min(1).max(100).default(DEFAULT_QUEUE_PREFIX),
    /**
     * Most due deliveries of one event-loop turn handed off as one `vote.batch` job; 1 adds one
     * `vote.create` job per delivery.
     */
    DELIVERY_JOB_BATCH_MAX: z.coerce
      .number()
      .int()
      .min(1)
      .max(DELIVERY_BATCH_MAX)
      .default(DEFAULT_DELIVERY_JOB_BATCH_MAX),
    WEBHOOK_SECRET_OVERLAP_MS: SecretOverlap,
  })
  .superRefine((env, ctx) => {
    checkHttpTimeouts(env, ctx);
    checkKeyRing(env, ctx, env.NODE_ENV !== "test");
    checkClusterQueuePrefix(env, ctx);
    if (env.NODE_ENV === "test") return;
    if (!env.INTERNAL_API_KEY)
      ctx.addIssue({ code: "custom", path: ["INTERNAL_API_KEY"], message: "is required" });
  });
export type IngestEnv = z.output<typeof IngestEnv>;

/** The only place vote-ingest reads process.env. */
export function loadEnv(source: Record<string, string | undefined> = process.env): IngestEnv {
  return loadEnvOrExit(IngestEnv, source);
}

/** botctl's DB_CONNECT_TIMEOUT_MS when it is not set. */
export const BOTCTL_CONNECT_TIMEOUT_MS = 5_000;

/**
 * botctl needs the stores, the encryption key and the rules a webhook URL is checked and tested
 * by (the same variables as vote-ingest's, so both treat a URL alike), not the listener or the
 * internal key; and the OpenTelemetry variables, since a redelivery it starts is a trace of its own
 * (docs/tracing.md). `pnpm botctl` reads the repo's `.env` as `pnpm start` does.
 */
export const CliEnv = z
  .object({
    ...telemetryEnvFields("botdir-botctl"),
    DATABASE_URL: EnvFields.DATABASE_URL,
    DATABASE_DIRECT_URL: EnvFields.DATABASE_DIRECT_URL,
    DB_PREPARED_STATEMENTS: EnvFields.DB_PREPARED_STATEMENTS,
    /**
     * The wait for a connection, as the apps' (the container's value when botctl runs inside
     * one); 5 s by default: a one-shot command opens its connections cold, and on a busy host
     * that takes longer than the apps' 500 ms.
     */
    DB_CONNECT_TIMEOUT_MS: dbConnectTimeout(BOTCTL_CONNECT_TIMEOUT_MS),
    REDIS_URL: EnvFields.REDIS_URL,
    REDIS_CLUSTER_NODES: EnvFields.REDIS_CLUSTER_NODES,
    SECRET_ENCRYPTION_KEYS: EnvFields.encryptionKeys.optional(),
    SECRET_ENCRYPTION_KEY: EnvFields.encryptionKey.optional(),
    WEBHOOK_ALLOW_PRIVATE_TARGETS: EnvFields.boolean(false),
    WEBHOOK_DNS_TIMEOUT_MS: DnsTimeout,
    WEBHOOK_DNS_SERVERS: DnsServers,
    QUEUE_PREFIX: z.string().min(1).max(100).default(DEFAULT_QUEUE_PREFIX),
    WEBHOOK_SECRET_OVERLAP_MS: SecretOverlap,
  })
  .superRefine((env, ctx) => {
    checkKeyRing(env, ctx, false);
    checkClusterQueuePrefix(env, ctx);
  });
export type CliEnv = z.output<typeof CliEnv>;

export function loadCliEnv(source: Record<string, string | undefined> = process.env): CliEnv {
  return parseEnv(CliEnv, source);
}
