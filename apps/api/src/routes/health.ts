import { healthHandler } from "@botdir/service-kit";
import type { Router } from "express";
import type { ApiDeps } from "../deps.js";
import { allowOnly } from "../http/methods.js";

/**
 * GET /api/health: no credential. 200 {"status":"ok","checks":{"postgres":"ok","redis":"ok"}}
 * when the service can serve; 503 with the same shape plus `error` naming what is down.
 */
export function registerHealth(router: Router, deps: Pick<ApiDeps, "db" | "redis">): void {
  router.get("/api/health", healthHandler(deps));
  allowOnly(router, "/api/health", ["GET"]);
}
