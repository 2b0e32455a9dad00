/**
 * GET /internal/v1/openapi.json: the OpenAPI 3.1 document of this listener, built once from the
 * zod schemas. Behind INTERNAL_API_KEY like every /internal/v1 endpoint: it describes internal
 * endpoints, and its readers (the site's developers, operators) hold the key.
 */
import { methodNotAllowed } from "@botdir/service-kit";
import type { Router } from "express";
import type { IngestDeps } from "../deps.js";
import { requireInternalKey } from "../internal-auth.js";
import { buildOpenApi } from "../services/openapi.js";

export const OPENAPI_PATH = "/internal/v1/openapi.json";

export function registerOpenApi(router: Router, deps: Pick<IngestDeps, "internalApiKey">): void {
  const document = buildOpenApi();
  router.get(OPENAPI_PATH, requireInternalKey(deps.internalApiKey), (_req, res) => {
    res.setHeader("Cache-Control", "no-store");
    res.json(document);
  });
  router.all(OPENAPI_PATH, methodNotAllowed(["GET"]));
}
