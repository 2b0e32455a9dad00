import { z } from "zod";
import type { Logger } from "./http.js";
import { parseClusterNodes, type RedisTarget } from "./redis.js";
import { type HttpTimeouts, httpTimeoutsProblem } from "./serve.js";

/**
 * Why a postgresql:// URL names several hosts (libpq's way to follow a primary: `host1,host2` in
 * the authority, `host=a,b` or `target_session_attrs` in the query), or null. node-postgres does
 * not parse such a URL (the migration stops with `Invalid URL`), so the env check refuses it.
 */
export function multiHostProblem(url: string): string | null {
  const authority = /^postgres(?:ql)?:\/\/([^/?#]*)/.exec(url)?.[1] ?? "";
  const hosts = authority.slice(authority.lastIndexOf("@") + 1);
  const query = new URLSearchParams(url.split("?")[1]?.split("#")[0] ?? "");
  if (!hosts.includes(",") && !(query.get("host") ?? "").includes(",") && !query.has("target_session_attrs"))
    return null;
  return "names several hosts (libpq multi-host), which node-postgres cannot use: point it at one address the failover moves (a PgBouncer entry repointed by RELOAD, or a DNS name), see docs/scaling.md Failover";
}

const postgresUrl = z
  .string()
  .regex(/^postgres(ql)?:\/\//, "must be a postgresql:// URL")
  .superRefine((url, ctx) => {
    const problem = multiHostProblem(url);
    if (problem) ctx.addIssue({ code: "custom", message: problem });
  });

/**
 * DB_CONNECT_TIMEOUT_MS with its bounds (100 ms to 60 s) and a default: 500 ms for the apps (a
 * request fails fast while PostgreSQL is unreachable), longer for a one-shot command (botctl)
 * that opens its connections cold.
 */
export function dbConnectTimeout(fallback: number) {
  return z.coerce.number().int().min(100).max(60_000).default(fallback);
}

/** Building blocks for the apps' env schemas, with the defaults of docs/operations. */
export const EnvFields = {
  NODE_ENV: z.enum(["development", "production", "test"]).default("development"),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  DATABASE_URL: postgresUrl.default("postgresql://postgres@127.0.0.1:5432/botdir"),
  /**
   * PostgreSQL itself, for what needs a session across transactions (migrations, the API's
   * LISTEN, the retention job's advisory lock) when DATABASE_URL is a transaction-pooling
   * PgBouncer. Default DATABASE_URL.
   */
  DATABASE_DIRECT_URL: postgresUrl.optional(),
  /** Named prepared statements: auto (off when DATABASE_DIRECT_URL differs), on, off. */
  DB_PREPARED_STATEMENTS: z.enum(["auto", "on", "off"]).default("auto"),
  REDIS_URL: z
    .string()
    .regex(/^rediss?:\/\//, "must be a redis:// or rediss:// URL")
    .default("redis://127.0.0.1:6379"),
  /** `host:port,host:port,…`: every Redis connection is a Redis Cluster client (REDIS_URL unused). */
  REDIS_CLUSTER_NODES: z
    .string()
    .refine((v) => parseClusterNodes(v) !== null, "must be host:port pairs separated by commas")
    .optional(),
  DB_POOL_MAX: z.coerce.number().int().min(1).max(200).default(10),
  /**
   * How long a query waits for a pool connection (a new one, or a free one) before the request
   * fails with the 500 and Retry-After: while PostgreSQL is unreachable requests fail fast.
   */
  DB_CONNECT_TIMEOUT_MS: dbConnectTimeout(500),
  /** After SIGTERM: /readyz answers 503 and the app keeps serving this long before closing. */
  SHUTDOWN_DRAIN_MS: z.coerce.number().int().min(0).max(120_000).default(5_000),
  /** Keep-alive idle timeout of every listener: longer than the load balancer's idle timeout. */
  HTTP_KEEP_ALIVE_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(65_000),
  /** Time for a request's headers: longer than HTTP_KEEP_ALIVE_TIMEOUT_MS. */
  HTTP_HEADERS_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(66_000),
  /** Time for a whole request (headers and body): at least HTTP_HEADERS_TIMEOUT_MS. */
  HTTP_REQUEST_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(90_000),
  port: (fallback: number) => z.coerce.number().int().min(0).max(65_535).default(fallback),
  /** `true`/`false`, `1`/`0`, `yes`/`no`. */
  boolean: (fallback: boolean) =>
    z
      .enum(["true", "false", "1", "0", "yes", "no", ""])
      .default(fallback ? "true" : "false")
      .transform((v) => v === "true" || v === "1" || v === "yes"),
  /** A 32-byte key: 64 hex characters or canonical base64 of exactly 32 bytes (nothing lenient). */
  encryptionKey: z
    .string()
    .refine((v) => decodeEncryptionKey(v) !== null, "must be 32 bytes as 64 hex characters or base64"),
  /** A key ring: comma-separated 32-byte keys (each as encryptionKey); the first encrypts. */
  encryptionKeys: z
    .string()
    .refine(
      (v) => v.split(",").every((k) => decodeEncryptionKey(k) !== null),
      "must be comma-separated 32-byte keys, each 64 hex characters or base64",
    ),
  /** Comma-separated items (spaces around them dropped, empty ones skipped), each `valid`. */
  list: (valid: (item: string) => boolean, message: string) =>
    z
      .string()
      .transform((v) =>
        v
          .split(",")
          .map((s) => s.trim())
          .filter((s) => s.length > 0),
      )
      .refine((list) => list.every(valid), message),
} as const;

/** The fields every app's env has: logging, PostgreSQL, Redis, shutdown and the listener timeouts. */
export const ServiceEnvFields = {
  NODE_ENV: EnvFields.NODE_ENV,
  LOG_LEVEL: EnvFields.LOG_LEVEL,
  DATABASE_URL: EnvFields.DATABASE_URL,
  DATABASE_DIRECT_URL: EnvFields.DATABASE_DIRECT_URL,
  DB_PREPARED_STATEMENTS: EnvFields.DB_PREPARED_STATEMENTS,
  REDIS_URL: EnvFields.REDIS_URL,
  REDIS_CLUSTER_NODES: EnvFields.REDIS_CLUSTER_NODES,
  DB_POOL_MAX: EnvFields.DB_POOL_MAX,
  DB_CONNECT_TIMEOUT_MS: EnvFields.DB_CONNECT_TIMEOUT_MS,
  SHUTDOWN_DRAIN_MS: EnvFields.SHUTDOWN_DRAIN_MS,
  HTTP_KEEP_ALIVE_TIMEOUT_MS: EnvFields.HTTP_KEEP_ALIVE_TIMEOUT_MS,
  HTTP_HEADERS_TIMEOUT_MS: EnvFields.HTTP_HEADERS_TIMEOUT_MS,
  HTTP_REQUEST_TIMEOUT_MS: EnvFields.HTTP_REQUEST_TIMEOUT_MS,
} as const;

/** The Redis an app's connections go to: the Cluster of REDIS_CLUSTER_NODES, or REDIS_URL. */
export function redisTargetOf(env: {
  REDIS_URL: string;
  REDIS_CLUSTER_NODES?: string | undefined;
}): RedisTarget {
  const nodes = env.REDIS_CLUSTER_NODES ? parseClusterNodes(env.REDIS_CLUSTER_NODES) : null;
  return nodes ? { url: env.REDIS_URL, clusterNodes: nodes } : { url: env.REDIS_URL };
}

/** createDb's connection options (@botdir/db) from an env parsed with EnvFields. */
export function databaseOf(env: {
  DATABASE_URL: string;
  DATABASE_DIRECT_URL?: string | undefined;
  DB_PREPARED_STATEMENTS: "auto" | "on" | "off";
  DB_POOL_MAX: number;
  DB_CONNECT_TIMEOUT_MS: number;
}) {
  return {
    url: env.DATABASE_URL,
    directUrl: env.DATABASE_DIRECT_URL ?? env.DATABASE_URL,
    preparedStatements: env.DB_PREPARED_STATEMENTS,
    poolMax: env.DB_POOL_MAX,
    connectionTimeoutMs: env.DB_CONNECT_TIMEOUT_MS,
  };
}

/** The three listener timeouts of an env parsed with EnvFields' HTTP_*_TIMEOUT_MS fields. */
export function httpTimeoutsOf(env: {
  HTTP_KEEP_ALIVE_TIMEOUT_MS: number;
  HTTP_HEADERS_TIMEOUT_MS: number;
  HTTP_REQUEST_TIMEOUT_MS: number;
}): HttpTimeouts {
  return {
    keepAliveMs: env.HTTP_KEEP_ALIVE_TIMEOUT_MS,
    headersMs: env.HTTP_HEADERS_TIMEOUT_MS,
    requestMs: env.HTTP_REQUEST_TIMEOUT_MS,
  };
}

/**
 * What an app's main.ts connects with, from its env parsed with EnvFields: createDb's options (a
 * switch to unnamed statements logged as `prepared_statements_off`), the Redis target and the
 * listener timeouts.
 */
export function connectionsOf(
  env: Parameters<typeof databaseOf>[0] &
    Parameters<typeof redisTargetOf>[0] &
    Parameters<typeof httpTimeoutsOf>[0],
  logger: Logger,
) {
  return {
    database: {
      ...databaseOf(env),
      onPreparedStatementsOff: (reason: string) => logger.warn({ event: "prepared_statements_off" }, reason),
    },
    redis: redisTargetOf(env),
    httpTimeouts: httpTimeoutsOf(env),
  };
}

/** superRefine of every app env: the order of the listener timeouts (one line when broken). */
export function checkHttpTimeouts(
  env: {
    HTTP_KEEP_ALIVE_TIMEOUT_MS: number;
    HTTP_HEADERS_TIMEOUT_MS: number;
    HTTP_REQUEST_TIMEOUT_MS: number;
  },
  ctx: z.RefinementCtx,
): void {
  const problem = httpTimeoutsProblem(httpTimeoutsOf(env));
  if (problem !== null) {
    const [name, ...rest] = problem.split(" ");
    ctx.addIssue({ code: "custom", path: [name as string], message: rest.join(" ") });
  }
}

/**
 * The hash tag Redis Cluster hashes a key by: the text between the first `{` and the first `}`
 * after it, when not empty (null otherwise, and the whole key is hashed).
 */
export function hashTagOf(key: string): string | null {
  const open = key.indexOf("{");
  const close = open === -1 ? -1 : key.indexOf("}", open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : null;
}

/**
 * superRefine step of an env with QUEUE_PREFIX: on a Redis Cluster every key of a BullMQ queue
 * must hash to one slot, which only a `{hash tag}` in the prefix ensures; without one the queue
 * fails at run time with CROSSSLOT, so the start is refused instead.
 */
export function checkClusterQueuePrefix(
  env: { REDIS_CLUSTER_NODES?: string | undefined; QUEUE_PREFIX: string },
  ctx: z.RefinementCtx,
): void {
  if (env.REDIS_CLUSTER_NODES === undefined || hashTagOf(env.QUEUE_PREFIX) !== null) return;
  ctx.addIssue({
    code: "custom",
    path: ["QUEUE_PREFIX"],
    message: "must contain a {hash tag}, e.g. {botdir}, when REDIS_CLUSTER_NODES is set",
  });
}

/**
 * Strict decoding of a 32-byte key: 64 hex characters, or base64/base64url of exactly 32 bytes
 * (43 characters, or 44 ending in one `=`), canonical. The one decoder of SECRET_ENCRYPTION_KEY(S):
 * the apps hand the decoded ring (keyRing) to @botdir/db's createSecretBox.
 */
export function decodeEncryptionKey(value: string): Buffer | null {
  const v = value.trim();
  if (/^[0-9a-fA-F]{64}$/.test(v)) return Buffer.from(v, "hex");
  if (!/^[A-Za-z0-9+/]{43}=?$/.test(v) && !/^[A-Za-z0-9_-]{43}=?$/.test(v)) return null;
  const std = v.replace(/-/g, "+").replace(/_/g, "/").replace(/=$/, "");
  const bytes = Buffer.from(std, "base64");
  return bytes.length === 32 && bytes.toString("base64").replace(/=$/, "") === std ? bytes : null;
}

/** The env variables of the key ring (SECRET_ENCRYPTION_KEYS, or the single SECRET_ENCRYPTION_KEY). */
export interface KeyRingEnv {
  SECRET_ENCRYPTION_KEYS?: string | undefined;
  SECRET_ENCRYPTION_KEY?: string | undefined;
}

/**
 * superRefine step of an app's env: the two variables are exclusive (which one would win is a
 * question nobody should have to ask during a rotation), and `required` asks for one of them.
 */
export function checkKeyRing(env: KeyRingEnv, ctx: z.RefinementCtx, required: boolean): void {
  if (env.SECRET_ENCRYPTION_KEYS !== undefined && env.SECRET_ENCRYPTION_KEY !== undefined) {
    ctx.addIssue({
      code: "custom",
      path: ["SECRET_ENCRYPTION_KEY"],
      message:
        "must not be set together with SECRET_ENCRYPTION_KEYS (put every key in SECRET_ENCRYPTION_KEYS)",
    });
  } else if (
    required &&
    env.SECRET_ENCRYPTION_KEYS === undefined &&
    env.SECRET_ENCRYPTION_KEY === undefined
  ) {
    ctx.addIssue({ code: "custom", path: ["SECRET_ENCRYPTION_KEY"], message: "is required" });
  }
}

/** The decoded key ring, first key first (it encrypts); empty when neither variable is set. */
export function keyRing(env: KeyRingEnv): Buffer[] {
  const text = env.SECRET_ENCRYPTION_KEYS ?? env.SECRET_ENCRYPTION_KEY;
  if (text === undefined) return [];
  return text.split(",").map((k) => {
    const key = decodeEncryptionKey(k);
    if (!key) throw new EnvError("Invalid environment: SECRET_ENCRYPTION_KEYS must be 32-byte keys.");
    return key;
  });
}

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
