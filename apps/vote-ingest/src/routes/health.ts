import { healthHandler } from "@botdir/service-kit";
import type { Router } from "express";
import type { IngestDeps } from "../deps.js";

/** GET /health: no credential; same body as the API's /api/health. */
export function registerHealth(router: Router, deps: Pick<IngestDeps, "db" | "redis">): void {
  router.get("/health", healthHandler(deps));
}
