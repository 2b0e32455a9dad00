/** GET /api/v1/openapi.json: the OpenAPI 3.1 document, built once from the zod schemas. */
import type { Router } from "express";
import { allowOnly } from "../http/methods.js";
import { buildOpenApi } from "../services/openapi.js";

export const OPENAPI_PATH = "/api/v1/openapi.json";

export function registerOpenApi(router: Router): void {
  const document = buildOpenApi();
  router.get(OPENAPI_PATH, (_req, res) => {
    res.setHeader("Cache-Control", "public, max-age=3600");
    res.json(document);
  });
  allowOnly(router, OPENAPI_PATH, ["GET"]);
}
