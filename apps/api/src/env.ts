import { checkHttpTimeouts, EnvFields, loadEnvOrExit } from "@botdir/service-kit";
import { z } from "zod";

export const ApiEnv = z.object({
  NODE_ENV: EnvFields.NODE_ENV,
  LOG_LEVEL: EnvFields.LOG_LEVEL,
  DATABASE_URL: EnvFields.DATABASE_URL,
  DATABASE_DIRECT_URL: EnvFields.DATABASE_DIRECT_URL,
  DB_PREPARED_STATEMENTS: EnvFields.DB_PREPARED_STATEMENTS,
  REDIS_URL: EnvFields.REDIS_URL,
  REDIS_CLUSTER_NODES: EnvFields.REDIS_CLUSTER_NODES,
  /** The token set's LISTEN connection (outside the pool). Default DATABASE_DIRECT_URL. */
  DATABASE_LISTEN_URL: EnvFields.DATABASE_DIRECT_URL,
  DB_POOL_MAX: EnvFields.DB_POOL_MAX,
  DB_CONNECT_TIMEOUT_MS: EnvFields.DB_CONNECT_TIMEOUT_MS,
  SHUTDOWN_DRAIN_MS: EnvFields.SHUTDOWN_DRAIN_MS,
  HTTP_KEEP_ALIVE_TIMEOUT_MS: EnvFields.HTTP_KEEP_ALIVE_TIMEOUT_MS,
  HTTP_HEADERS_TIMEOUT_MS: EnvFields.HTTP_HEADERS_TIMEOUT_MS,
  HTTP_REQUEST_TIMEOUT_MS: EnvFields.HTTP_REQUEST_TIMEOUT_MS,
  API_PORT: EnvFields.port(3000),
  /**
   * Internal listener of GET /metrics. The API port is public, so metrics are never served there;
   * expose this port to Prometheus only (never publish it).
   */
  METRICS_PORT: EnvFields.port(9464),
});
export type ApiEnv = z.output<typeof ApiEnv>;

/** The only place the API reads process.env (with the listener timeouts' order checked). */
export function loadEnv(source: Record<string, string | undefined> = process.env): ApiEnv {
  return loadEnvOrExit(ApiEnv.superRefine(checkHttpTimeouts), source);
}
