/** Dependency checks behind every app's health endpoint. */
import type { RequestHandler } from "express";
import { withLoopTimeout } from "./timeout.js";

export type HealthChecks = Record<string, () => Promise<unknown>>;

export interface HealthReport {
  ok: boolean;
  body: {
    status: "ok" | "unavailable";
    checks: Record<string, "ok" | "down">;
    error?: string;
  };
}

const NAMES: Record<string, string> = { postgres: "PostgreSQL", redis: "Redis" };

/**
 * Runs every check in parallel with a short timeout, measured by withLoopTimeout: an answer that
 * arrived while our own event loop was busy counts, so a loaded host does not report a healthy
 * store as down; a late loop gives a check at most half its timeout more (1.5 s by default, inside
 * the probes' 2 s). 200 body: {status: "ok", checks}; 503 body:
 * {status: "unavailable", checks, error: "<which dependency> is unreachable."}.
 */
export async function runHealthChecks(checks: HealthChecks, timeoutMs = 1_000): Promise<HealthReport> {
  const names = Object.keys(checks);
  const results = await Promise.allSettled(
    names.map((name) => withLoopTimeout(checks[name]!(), timeoutMs, timeoutMs * 1.5)),
  );
  const statuses: Record<string, "ok" | "down"> = {};
  const down: string[] = [];
  results.forEach((result, i) => {
    const name = names[i]!;
    statuses[name] = result.status === "fulfilled" ? "ok" : "down";
    if (result.status === "rejected") down.push(NAMES[name] ?? name);
  });
  if (down.length === 0) return { ok: true, body: { status: "ok", checks: statuses } };
  const error = `${down.join(" and ")} ${down.length === 1 ? "is" : "are"} unreachable.`;
  return { ok: false, body: { status: "unavailable", checks: statuses, error } };
}

/**
 * Every app's health endpoint (no credential): PostgreSQL and Redis checked, 200 or 503 with the
 * report's body, never cached.
 */
export function healthHandler(deps: {
  db: { pool: { query(sql: string): Promise<unknown> } };
  redis: { ping(): Promise<unknown> };
}): RequestHandler {
  return async (_req, res) => {
    const report = await runHealthChecks({
      postgres: () => deps.db.pool.query("SELECT 1"),
      redis: () => deps.redis.ping(),
    });
    res.setHeader("Cache-Control", "no-store");
    res.status(report.ok ? 200 : 503).json(report.body);
  };
}
