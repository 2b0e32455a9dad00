import { EnvFields, loadEnvOrExit } from "@botdir/schema";
import { z } from "zod";

const DelayList = z
  .string()
  .regex(/^\d+(,\d+){3}$/, "must be four comma-separated millisecond delays")
  .transform((v) => v.split(",").map(Number));

export const DispatcherEnv = z
  .object({
    NODE_ENV: EnvFields.NODE_ENV,
    LOG_LEVEL: EnvFields.LOG_LEVEL,
    DATABASE_URL: EnvFields.DATABASE_URL,
    REDIS_URL: EnvFields.REDIS_URL,
    DB_POOL_MAX: EnvFields.DB_POOL_MAX,
    DISPATCHER_PORT: EnvFields.port(3002),
    SECRET_ENCRYPTION_KEY: EnvFields.encryptionKey.optional(),
    WEBHOOK_TIMEOUT_MS: z.coerce.number().int().min(100).max(120_000).default(10_000),
    WEBHOOK_RETRY_DELAYS_MS: DelayList.default([60_000, 300_000, 1_800_000, 7_200_000]),
    WEBHOOK_ALLOW_PRIVATE_TARGETS: EnvFields.boolean(false),
    /** Attempts run in parallel by one replica. */
    DISPATCHER_CONCURRENCY: z.coerce.number().int().min(1).max(1_000).default(50),
  })
  .superRefine((env, ctx) => {
    if (env.NODE_ENV !== "test" && !env.SECRET_ENCRYPTION_KEY) {
      ctx.addIssue({ code: "custom", path: ["SECRET_ENCRYPTION_KEY"], message: "is required" });
    }
  });
export type DispatcherEnv = z.output<typeof DispatcherEnv>;

/** The only place the dispatcher reads process.env. */
export function loadEnv(source: Record<string, string | undefined> = process.env): DispatcherEnv {
  return loadEnvOrExit(DispatcherEnv, source);
}
