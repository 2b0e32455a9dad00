import { DEFAULT_QUEUE_PREFIX, EnvFields, loadEnvOrExit } from "@botdir/schema";
import { z } from "zod";

const DelayList = z
  .string()
  .regex(/^\d+(,\d+){3}$/, "must be four comma-separated millisecond delays")
  .transform((v) => v.split(",").map(Number));

export const DispatcherEnv = z.object({
  NODE_ENV: EnvFields.NODE_ENV,
  LOG_LEVEL: EnvFields.LOG_LEVEL,
  DATABASE_URL: EnvFields.DATABASE_URL,
  REDIS_URL: EnvFields.REDIS_URL,
  /**
   * Each attempt holds a connection twice, briefly (one claim statement, one record statement), so
   * 20 connections keep up with the default 50 attempts in flight; 10 made attempts queue for the
   * pool at ~1,000 deliveries/s. Keep replicas × DB_POOL_MAX within PostgreSQL's max_connections.
   */
  DB_POOL_MAX: EnvFields.DB_POOL_MAX.unwrap().default(20),
  DISPATCHER_PORT: EnvFields.port(3002),
  /** Decrypts webhook secrets: without it nothing can be signed, so it is required everywhere. */
  SECRET_ENCRYPTION_KEY: EnvFields.encryptionKey,
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
  DISPATCHER_STALLED_INTERVAL_MS: z.coerce.number().int().min(200).max(600_000).default(30_000),
});
export type DispatcherEnv = z.output<typeof DispatcherEnv>;

/** The only place the dispatcher reads process.env. */
export function loadEnv(source: Record<string, string | undefined> = process.env): DispatcherEnv {
  return loadEnvOrExit(DispatcherEnv, source);
}
