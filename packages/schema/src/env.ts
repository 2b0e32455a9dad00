import { z } from "zod";

/** Building blocks for the apps' env schemas, with the defaults of docs/operations. */
export const EnvFields = {
  NODE_ENV: z.enum(["development", "production", "test"]).default("development"),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  DATABASE_URL: z
    .string()
    .regex(/^postgres(ql)?:\/\//, "must be a postgresql:// URL")
    .default("postgresql://postgres@127.0.0.1:5432/botdir"),
  REDIS_URL: z
    .string()
    .regex(/^rediss?:\/\//, "must be a redis:// or rediss:// URL")
    .default("redis://127.0.0.1:6379"),
  DB_POOL_MAX: z.coerce.number().int().min(1).max(200).default(10),
  port: (fallback: number) => z.coerce.number().int().min(0).max(65_535).default(fallback),
  /** `true`/`false`, `1`/`0`, `yes`/`no`. */
  boolean: (fallback: boolean) =>
    z
      .enum(["true", "false", "1", "0", "yes", "no", ""])
      .default(fallback ? "true" : "false")
      .transform((v) => v === "true" || v === "1" || v === "yes"),
  /** A 32-byte key, 64 hex characters or base64. */
  encryptionKey: z
    .string()
    .refine(
      (v) => /^[0-9a-fA-F]{64}$/.test(v.trim()) || Buffer.from(v.trim(), "base64").length === 32,
      "must be 32 bytes as 64 hex characters or base64",
    ),
} as const;

export class EnvError extends Error {}

/**
 * Parses the environment with `schema`. On failure throws EnvError with one line naming the first
 * bad variable, e.g. "Invalid environment: API_PORT must be a number."
 */
export function parseEnv<S extends z.ZodType>(
  schema: S,
  source: Record<string, string | undefined>,
): z.output<S> {
  // An empty variable counts as unset, as shells and compose files often export VAR=.
  const cleaned = Object.fromEntries(Object.entries(source).filter(([, v]) => v !== undefined && v !== ""));
  const result = schema.safeParse(cleaned);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const name = issue?.path.join(".") || "environment";
  const missing = issue?.code === "invalid_type" && cleaned[name] === undefined;
  const message = missing ? "is required" : (issue?.message ?? "is invalid").replace(/^Invalid input: /, "");
  throw new EnvError(`Invalid environment: ${name} ${message.replace(/\.$/, "")}.`);
}

/** parseEnv for main.ts: prints the one line to stderr and exits 1. */
export function loadEnvOrExit<S extends z.ZodType>(
  schema: S,
  source: Record<string, string | undefined>,
): z.output<S> {
  try {
    return parseEnv(schema, source);
  } catch (error) {
    if (error instanceof EnvError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(1);
    }
    throw error;
  }
}

/**
 * ioredis options of every connection that must fail at once while Redis is down rather than
 * queue commands and hang (queue producers, the API's limiter and caches, scrape-time reads): no
 * offline queue, one retry, a 2 s connect timeout. Never for a BullMQ worker connection, which
 * needs `maxRetriesPerRequest: null`.
 */
export const FAIL_FAST_REDIS = {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 1,
  connectTimeout: 2_000,
} as const;
