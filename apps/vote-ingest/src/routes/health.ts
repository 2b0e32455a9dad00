import { runHealthChecks } from "@botdir/service-kit";
import type { Router } from "express";
import type { IngestDeps } from "../deps.js";

/** GET /health: no credential; same body as the API's /api/health. */
export function registerHealth(router: Router, deps: Pick<IngestDeps, "db" | "redis">): void {
  router.get("/health", async (_req, res) => {
    const report = await runHealthChecks({
      postgres: () => deps.db.pool.query("SELECT 1"),
      redis: () => deps.redis.ping(),
    });
    res.setHeader("Cache-Control", "no-store");
    res.status(report.ok ? 200 : 503).json(report.body);
  });
}
