import { DEFAULT_QUEUE_PREFIX, RECOVERY_MAX_AGE_DAYS } from "@botdir/schema";
import {
  checkClusterQueuePrefix,
  checkHttpTimeouts,
  checkKeyRing,
  EnvFields,
  loadEnvOrExit,
  ServiceEnvFields,
  telemetryEnvFields,
} from "@botdir/service-kit";
import { isDnsServerAddress } from "@botdir/webhook-targets";
import { z } from "zod";

const DelayList = z
  .string()
  .regex(/^\d+(,\d+){3}$/, "must be four comma-separated millisecond delays")
  .transform((v) => v.split(",").map(Number));

/** WEBHOOK_DNS_SERVERS: comma-separated `ip`, `ip:port`, `[ipv6]:port`; empty = /etc/resolv.conf. */
const DnsServers = EnvFields.list(
  isDnsServerAddress,
  "must be comma-separated IP addresses (optionally :port)",
);

/** The DNS deadline must leave the attempt time to connect and be answered. */
export function checkDnsDeadline(
  env: { WEBHOOK_DNS_TIMEOUT_MS?: number | undefined; WEBHOOK_TIMEOUT_MS: number },
  ctx: z.RefinementCtx,
): void {
  if (env.WEBHOOK_DNS_TIMEOUT_MS !== undefined && env.WEBHOOK_DNS_TIMEOUT_MS >= env.WEBHOOK_TIMEOUT_MS) {
    ctx.addIssue({
      code: "custom",
      path: ["WEBHOOK_DNS_TIMEOUT_MS"],
      message: "must be less than WEBHOOK_TIMEOUT_MS",
    });
  }
}

export const DispatcherEnv = z
  .object({
    ...ServiceEnvFields,
    ...telemetryEnvFields("botdir-webhook-dispatcher"),
    /**
     * Each attempt holds a connection twice, briefly (one claim statement, one record statement), so
     * 20 connections keep up with the default 50 attempts in flight; 10 made attempts queue for the
     * pool at ~1,000 deliveries/s. Keep replicas × DB_POOL_MAX within PostgreSQL's max_connections.
     */
    DB_POOL_MAX: EnvFields.DB_POOL_MAX.unwrap().default(20),
    DISPATCHER_PORT: EnvFields.port(3002),
    /**
     * Key ring decrypting webhook secrets (every key decrypts; the first is the one vote-ingest
     * encrypts with): without it nothing can be signed, so one of the two is required everywhere.
     */
    SECRET_ENCRYPTION_KEYS: EnvFields.encryptionKeys.optional(),
    /** A ring of one; exclusive with SECRET_ENCRYPTION_KEYS. */
    SECRET_ENCRYPTION_KEY: EnvFields.encryptionKey.optional(),
    /** BullMQ key prefix; every producer and consumer of the queue must use the same one. */
    QUEUE_PREFIX: z.string().min(1).max(100).default(DEFAULT_QUEUE_PREFIX),
    WEBHOOK_TIMEOUT_MS: z.coerce.number().int().min(100).max(120_000).default(10_000),
    WEBHOOK_RETRY_DELAYS_MS: DelayList.default([60_000, 300_000, 1_800_000, 7_200_000]),
    WEBHOOK_ALLOW_PRIVATE_TARGETS: EnvFields.boolean(false),
    /** Attempts run in parallel by one replica. */
    DISPATCHER_CONCURRENCY: z.coerce.number().int().min(1).max(1_000).default(100),
    /**
     * BullMQ job lock: a replica that dies holding a job loses it after this long, and another
     * replica picks it up at its next stalled-job check. Also the margin of an attempt's claim in
     * PostgreSQL beyond WEBHOOK_TIMEOUT_MS.
     */
    DISPATCHER_LOCK_DURATION_MS: z.coerce.number().int().min(500).max(600_000).default(30_000),
    /**
     * Claims (and records) of the attempts in flight share one statement, up to this many per
     * statement, with at most DISPATCHER_DB_BATCH_IN_FLIGHT statements of each kind running; a claim
     * that finds a free slot goes at once. 1 turns batching off.
     */
    DISPATCHER_DB_BATCH_MAX: z.coerce.number().int().min(1).max(1_000).default(50),
    DISPATCHER_DB_BATCH_IN_FLIGHT: z.coerce.number().int().min(1).max(100).default(2),
    /** A webhook whose every attempt failed for this long (across enough deliveries) is disabled. */
    WEBHOOK_DISABLE_AFTER_MS: z.coerce
      .number()
      .int()
      .min(1_000)
      .default(5 * 24 * 60 * 60 * 1000),
    WEBHOOK_DISABLE_MIN_DELIVERIES: z.coerce.number().int().min(1).max(1_000).default(5),
    DISPATCHER_STALLED_INTERVAL_MS: z.coerce.number().int().min(200).max(600_000).default(30_000),
    /**
     * Deadline of one DNS lookup of a webhook host (asynchronous resolver, A and AAAA); a lookup that
     * fails or runs out of it is a failed attempt of kind `dns`. Default: 3000, or half of
     * WEBHOOK_TIMEOUT_MS when that is less. Must be less than WEBHOOK_TIMEOUT_MS.
     */
    WEBHOOK_DNS_TIMEOUT_MS: z.coerce.number().int().min(50).max(60_000).optional(),
    /** Nameservers for webhook hosts instead of /etc/resolv.conf's (comma-separated ip[:port]). */
    WEBHOOK_DNS_SERVERS: DnsServers.optional(),
    /**
     * Attempts in flight per bot webhook in one replica; further jobs of that webhook wait in the
     * queue (delayed, no attempt used) until one ends.
     */
    DISPATCHER_MAX_IN_FLIGHT_PER_WEBHOOK: z.coerce.number().int().min(1).max(1_000).default(4),
    /** Attempts in flight per origin (scheme, host, port) in one replica, over all its bots. */
    DISPATCHER_MAX_IN_FLIGHT_PER_ORIGIN: z.coerce.number().int().min(1).max(1_000).default(32),
    /**
     * A webhook whose latest attempt took longer than this or got no HTTP answer (timeout, DNS,
     * connection, TLS), or one with an attempt running longer than this, gets one attempt in flight
     * at a time until an attempt is quick again; so does a webhook this replica has not seen yet
     * (src/fairness.ts).
     */
    DISPATCHER_SLOW_ATTEMPT_MS: z.coerce.number().int().min(50).max(600_000).default(2_000),
    /**
     * Delivery retention (src/retention.ts): deliveries in a final state completed longer ago than
     * this are deleted with their attempts (each bot keeps its last ten attempts). One replica runs
     * it every WEBHOOK_RETENTION_INTERVAL_S (advisory lock); 0 turns it off in this replica.
     * Above the recovery window (RECOVERY_MAX_AGE_DAYS, 14): a recovery tells delivered votes from
     * undelivered ones by these rows, so a pruned delivered vote would be sent again.
     */
    WEBHOOK_RETENTION_DAYS: z.coerce
      .number()
      .int()
      .min(RECOVERY_MAX_AGE_DAYS + 1, {
        error: `must be more than ${RECOVERY_MAX_AGE_DAYS} (the recovery window, days): a recovery would send pruned delivered votes again`,
      })
      .max(3_650)
      .default(30),
    WEBHOOK_RETENTION_INTERVAL_S: z.coerce.number().int().min(0).max(604_800).default(3_600),
    WEBHOOK_RETENTION_BATCH: z.coerce.number().int().min(1).max(10_000).default(500),
  })
  .superRefine((env, ctx) => {
    checkKeyRing(env, ctx, true);
    checkDnsDeadline(env, ctx);
    checkClusterQueuePrefix(env, ctx);
  });
export type DispatcherEnv = z.output<typeof DispatcherEnv>;

/** The only place the dispatcher reads process.env (with the listener timeouts' order checked). */
export function loadEnv(source: Record<string, string | undefined> = process.env): DispatcherEnv {
  return loadEnvOrExit(DispatcherEnv.superRefine(checkHttpTimeouts), source);
}
