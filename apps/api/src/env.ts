import { EnvFields, loadEnvOrExit } from "@botdir/schema";
import { z } from "zod";

export const ApiEnv = z.object({
  NODE_ENV: EnvFields.NODE_ENV,
  LOG_LEVEL: EnvFields.LOG_LEVEL,
  DATABASE_URL: EnvFields.DATABASE_URL,
  REDIS_URL: EnvFields.REDIS_URL,
  DB_POOL_MAX: EnvFields.DB_POOL_MAX,
  API_PORT: EnvFields.port(3000),
  /**
   * Internal listener of GET /metrics. The API port is public, so metrics are never served there;
   * expose this port to Prometheus only (never publish it).
   */
  METRICS_PORT: EnvFields.port(9464),
});
export type ApiEnv = z.output<typeof ApiEnv>;

/** The only place the API reads process.env. */
export function loadEnv(source: Record<string, string | undefined> = process.env): ApiEnv {
  return loadEnvOrExit(ApiEnv, source);
}
