import {
  checkHttpTimeouts,
  EnvFields,
  loadEnvOrExit,
  ServiceEnvFields,
  telemetryEnvFields,
} from "@botdir/service-kit";
import { z } from "zod";

export const ApiEnv = z.object({
  ...ServiceEnvFields,
  ...telemetryEnvFields("botdir-api"),
  /** The token set's LISTEN connection (outside the pool). Default DATABASE_DIRECT_URL. */
  DATABASE_LISTEN_URL: EnvFields.DATABASE_DIRECT_URL,
  API_PORT: EnvFields.port(3000),
  /**
   * Internal listener of GET /metrics. The API port is public, so metrics are never served there;
   * expose this port to Prometheus only (never publish it).
   */
  METRICS_PORT: EnvFields.port(9464),
  /**
   * The API replicas sharing the limiter's Redis: while Redis fails, each replica counts alone and
   * allows ceil(limit / API_REPLICAS) per token and window.
   */
  API_REPLICAS: z.coerce.number().int().min(1).max(1_000).default(1),
  /** Event-loop lag past which unverified requests that need I/O (flood-budget.ts) are shed with 503. */
  API_SHED_LAG_MS: z.coerce.number().int().min(1).max(60_000).default(100),
  /**
   * Unknown-token refusals waiting for the token set's barrier at most, per process; badge misses
   * at most this and half of DB_POOL_MAX. Past it they are shed with 503.
   */
  API_FLOOD_MAX_PENDING: z.coerce.number().int().min(1).max(100_000).default(32),
});
export type ApiEnv = z.output<typeof ApiEnv>;

/** The only place the API reads process.env (with the listener timeouts' order checked). */
export function loadEnv(source: Record<string, string | undefined> = process.env): ApiEnv {
  return loadEnvOrExit(ApiEnv.superRefine(checkHttpTimeouts), source);
}
