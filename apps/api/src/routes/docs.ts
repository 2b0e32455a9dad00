/**
 * GET /docs: the API reference page (services/docs-page.ts), and GET /docs/assets/{file}: the
 * renderer and its init script, from this origin. No credential, no rate limit.
 */
import { ApiError, MESSAGES } from "@botdir/schema";
import type { Router } from "express";
import { allowOnly } from "../http/methods.js";
import {
  ASSET_CACHE_CONTROL,
  DOCS_ASSETS_PATH,
  DOCS_CSP,
  DOCS_PATH,
  docsPage,
  PAGE_CACHE_CONTROL,
} from "../services/docs-page.js";

export const DOCS_ASSET_PATH = `${DOCS_ASSETS_PATH}/:file`;

export function registerDocs(router: Router): void {
  const page = docsPage();
  router.get(DOCS_PATH, (_req, res) => {
    res.setHeader("Content-Security-Policy", DOCS_CSP);
    res.setHeader("Cache-Control", PAGE_CACHE_CONTROL);
    res.setHeader("X-Content-Type-Options", "nosniff");
    res.setHeader("Referrer-Policy", "no-referrer");
    res.type("html").send(page.html);
  });
  router.get(DOCS_ASSET_PATH, (req, res, next) => {
    const asset = page.assets.get(req.params.file);
    if (asset === undefined) return next(new ApiError("not_found", MESSAGES.routeNotFound));
    res.setHeader("Cache-Control", ASSET_CACHE_CONTROL);
    res.setHeader("X-Content-Type-Options", "nosniff");
    res.setHeader("Content-Type", asset.contentType);
    res.send(asset.body);
  });
  allowOnly(router, DOCS_PATH, ["GET"]);
  allowOnly(router, DOCS_ASSET_PATH, ["GET"]);
}
