/**
 * Bot token authentication. The token travels in `Authorization` as the bare token, `Bearer <token>`
 * or `Bot <token>` (discordbotlist.com clients); scheme names are case-insensitive. Only its
 * SHA-256 is ever compared (through the unique index on bots.token_hash); the token itself is
 * never stored, logged or cached, so a rotated token fails on the very next request everywhere.
 */
import type { Db } from "@botdir/db";
import { hashToken } from "@botdir/db";
import { ApiError, MESSAGES } from "@botdir/schema";
import type { Request } from "express";

const SCHEME = /^(?:bearer|bot)[ \t]+(.*)$/i;
/** Printable ASCII without spaces; our tokens are 43 base64url characters. */
const TOKEN_SHAPE = /^[\x21-\x7e]{1,512}$/;

/** The token in an Authorization value, or null when it is missing or unreadable. */
export function readToken(header: string | undefined): string | null {
  if (header === undefined) return null;
  const value = header.trim();
  const token = (SCHEME.exec(value)?.[1] ?? value).trim();
  return TOKEN_SHAPE.test(token) ? token : null;
}

// The two refusals carry nothing request-specific, so one instance each is thrown again and again:
// no Error (and stack trace) is built per refused request.
const UNAUTHORIZED = new ApiError("unauthorized", MESSAGES.invalidToken);
const BOT_NOT_FOUND = new ApiError("not_found", MESSAGES.botNotFound);

export function unauthorized(): ApiError {
  return UNAUTHORIZED;
}

/** One body for "other bot's id", "unknown id" and "not an id", so a token cannot probe ids. */
export function botNotFound(): ApiError {
  return BOT_NOT_FOUND;
}

/** SHA-256 of the request's token; 401 when the header is missing or unreadable. */
export function requireTokenHash(req: Pick<Request, "headers">): string {
  const token = readToken(req.headers.authorization);
  if (token === null) throw unauthorized();
  return hashToken(token);
}

/**
 * The bot ids of a batch of token hashes (createBatcher): one statement whatever the batch size,
 * one answer per hash in order (null: unknown token). The refusals use it: a token seen for the
 * first time in its rate window, and a rate-limited request, are authenticated with this and
 * nothing else before any body is read or any other query runs.
 */
export async function findBotIdsByTokens(db: Db, tokenHashes: readonly string[]): Promise<(string | null)[]> {
  const { rows } = await db.pool.query<{ i: string; id: string }>({
    name: "api.auth",
    text: `SELECT q.i, b.id
       FROM unnest($1::char(64)[]) WITH ORDINALITY AS q(token_hash, i)
       JOIN bots b ON b.token_hash = q.token_hash AND b.status = 'approved'`,
    values: [tokenHashes],
  });
  const answers: (string | null)[] = tokenHashes.map(() => null);
  for (const row of rows) answers[Number(row.i) - 1] = row.id;
  return answers;
}
