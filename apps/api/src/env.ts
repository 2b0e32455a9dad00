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
});
export type ApiEnv = z.output<typeof ApiEnv>;

/** The only place the API reads process.env (with the listener timeouts' order checked). */
export function loadEnv(source: Record<string, string | undefined> = process.env): ApiEnv {
  return loadEnvOrExit(ApiEnv.superRefine(checkHttpTimeouts), source);
}
