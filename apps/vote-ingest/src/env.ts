import { DEFAULT_QUEUE_PREFIX, EnvFields, loadEnvOrExit, parseEnv } from "@botdir/schema";
import { z } from "zod";

export const IngestEnv = z
  .object({
    NODE_ENV: EnvFields.NODE_ENV,
    LOG_LEVEL: EnvFields.LOG_LEVEL,
    DATABASE_URL: EnvFields.DATABASE_URL,
    REDIS_URL: EnvFields.REDIS_URL,
    DB_POOL_MAX: EnvFields.DB_POOL_MAX,
    INGEST_PORT: EnvFields.port(3001),
    /** Key the site frontend sends to the internal endpoints; required outside tests. */
    INTERNAL_API_KEY: z.string().min(16, "must be at least 16 characters").optional(),
    /** 32-byte key that encrypts webhook secrets at rest. */
    SECRET_ENCRYPTION_KEY: EnvFields.encryptionKey.optional(),
    WEBHOOK_ALLOW_PRIVATE_TARGETS: EnvFields.boolean(false),
    /** How often the outbox relay looks for deliveries to hand to the queue. */
    OUTBOX_RELAY_INTERVAL_MS: z.coerce.number().int().min(50).max(600_000).default(1_000),
    /** A pending delivery due this long ago without progress is handed off again (lost job). */
    OUTBOX_STALE_MS: z.coerce.number().int().min(1_000).max(86_400_000).default(60_000),
    /** BullMQ key prefix; must be the dispatcher's QUEUE_PREFIX. */
    QUEUE_PREFIX: z.string().min(1).max(100).default(DEFAULT_QUEUE_PREFIX),
  })
  .superRefine((env, ctx) => {
    if (env.NODE_ENV === "test") return;
    if (!env.INTERNAL_API_KEY)
      ctx.addIssue({ code: "custom", path: ["INTERNAL_API_KEY"], message: "is required" });
    if (!env.SECRET_ENCRYPTION_KEY) {
      ctx.addIssue({ code: "custom", path: ["SECRET_ENCRYPTION_KEY"], message: "is required" });
    }
  });
export type IngestEnv = z.output<typeof IngestEnv>;

/** The only place vote-ingest reads process.env. */
export function loadEnv(source: Record<string, string | undefined> = process.env): IngestEnv {
  return loadEnvOrExit(IngestEnv, source);
}

/** botctl needs the stores and the encryption key, not the listener or the internal key. */
export const CliEnv = z.object({
  DATABASE_URL: EnvFields.DATABASE_URL,
  REDIS_URL: EnvFields.REDIS_URL,
  SECRET_ENCRYPTION_KEY: EnvFields.encryptionKey.optional(),
  WEBHOOK_ALLOW_PRIVATE_TARGETS: EnvFields.boolean(false),
  QUEUE_PREFIX: z.string().min(1).max(100).default(DEFAULT_QUEUE_PREFIX),
});
export type CliEnv = z.output<typeof CliEnv>;

export function loadCliEnv(source: Record<string, string | undefined> = process.env): CliEnv {
  return parseEnv(CliEnv, source);
}
