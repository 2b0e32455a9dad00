/**
 * JSON body parsing after admission: the body is read only once 401, 404 and 429 have been
 * decided, and a parse error (invalid JSON, wrong content type, body too large) is kept in
 * `res.locals.bodyError` and raised by the handler, so the answer order is the same for every
 * problem.
 */
import { ApiError, MESSAGES } from "@botdir/schema";
import { requireJson, toApiError } from "@botdir/service-kit";
import express, { type Request, type Response } from "express";

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

/**
 * A reader of the request's JSON body, called by the handler once the token is authenticated and
 * within its limit (src/http/write.ts): a refused request never has a body byte read or parsed.
 * Resolves with `req.body` set, or with the failure kept for bodyError().
 */
export function jsonBodyReader(limit: string | number): (req: Request, res: Response) => Promise<void> {
  const contentType = requireJson();
  const parse = express.json({
    limit,
    // Any JSON value: a non-object gets the schema's "must be a JSON object" sentence.
    strict: false,
    type: ["application/json", "application/*+json"],
  });
  return (req, res) =>
    new Promise<void>((resolve) => {
      // An explicit empty body is not JSON (body-parser would turn it into {}).
      if (req.get("content-length") === "0") {
        res.locals.bodyError = new ApiError("bad_request", MESSAGES.invalidJson);
        return resolve();
      }
      contentType(req, res, (typeError?: unknown) => {
        if (typeError) {
          res.locals.bodyError = toApiError(typeError);
          return resolve();
        }
        parse(req, res, (parseError?: unknown) => {
          if (parseError) res.locals.bodyError = toApiError(parseError);
          resolve();
        });
      });
    });
}

/** The body parsing failure of this request, if any. */
export function bodyError(res: Response): ApiError | undefined {
  return res.locals.bodyError as ApiError | undefined;
}
