/**
 * JSON body parsing whose failures are deferred: the parse error (invalid JSON, wrong content
 * type, body too large) is kept in `res.locals.bodyError` and raised by the handler only after
 * 401, 404 and 429 have been decided, so the answer order is the same for every problem.
 */
import { ApiError, MESSAGES, requireJson, toApiError } from "@botdir/schema";
import express, { type RequestHandler, type Response } from "express";
import { readToken } from "../services/auth.js";

export interface BodyLimits {
  /**
   * 100 platform commands with options and names/descriptions localized into every locale the
   * platform has run to several hundred kB (256 kB is not enough), so 1 MB.
   */
  commands: string | number;
  /** No stats body a client sends comes near this. */
  stats: string | number;
}

export const DEFAULT_BODY_LIMITS: BodyLimits = { commands: "1mb", stats: "16kb" };

export function deferredJsonBody(limit: string | number): RequestHandler {
  const contentType = requireJson();
  const parse = express.json({
    limit,
    // Any JSON value: a non-object gets the schema's "must be a JSON object" sentence.
    strict: false,
    type: ["application/json", "application/*+json"],
  });
  return (req, res, next) => {
    // Without a readable token the answer is 401 whatever the body: do not read it.
    if (readToken(req.get("authorization")) === null) return next();
    // An explicit empty body is not JSON (body-parser would turn it into {}).
    if (req.get("content-length") === "0") {
      res.locals.bodyError = new ApiError("bad_request", MESSAGES.invalidJson);
      return next();
    }
    contentType(req, res, (typeError?: unknown) => {
      if (typeError) {
        res.locals.bodyError = toApiError(typeError);
        return next();
      }
      parse(req, res, (parseError?: unknown) => {
        if (parseError) res.locals.bodyError = toApiError(parseError);
        next();
      });
    });
  };
}

/** The body parsing failure of this request, if any. */
export function bodyError(res: Response): ApiError | undefined {
  return res.locals.bodyError as ApiError | undefined;
}
