import { ApiError, MESSAGES } from "@botdir/schema";
import { secretMatcher } from "@botdir/signing";
import type { RequestHandler } from "express";

/**
 * Guards the internal endpoints (site frontend → vote-ingest): the `Authorization` header must be
 * the INTERNAL_API_KEY, bare or as `Bearer <key>`, compared in constant time. An empty configured
 * key (only possible in tests) accepts nothing.
 */
export function requireInternalKey(key: string): RequestHandler {
  const matches = secretMatcher(key);
  return (req, _res, next) => {
    const header = req.get("authorization");
    const presented = header?.trim().replace(/^Bearer\s+/i, "") ?? "";
    if (key === "" || presented === "" || !matches(presented)) {
      return next(new ApiError("unauthorized", MESSAGES.invalidInternalKey));
    }
    next();
  };
}
