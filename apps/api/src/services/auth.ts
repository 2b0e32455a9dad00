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

export function unauthorized(): ApiError {
  return new ApiError("unauthorized", MESSAGES.invalidToken);
}

/** One body for "other bot's id", "unknown id" and "not an id", so a token cannot probe ids. */
export function botNotFound(): ApiError {
  return new ApiError("not_found", MESSAGES.botNotFound);
}

/** SHA-256 of the request's token; 401 when the header is missing or unreadable. */
export function requireTokenHash(req: Request): string {
  const token = readToken(req.get("authorization"));
  if (token === null) throw unauthorized();
  return hashToken(token);
}

/**
 * The token's bot id, or null for an unknown token. Only the slow paths use it (rate limited,
 * bad body, or a combined write that matched no row), to tell 401 from 404.
 */
export async function findBotIdByToken(db: Db, tokenHash: string): Promise<string | null> {
  const { rows } = await db.pool.query<{ id: string }>(
    "SELECT id FROM bots WHERE token_hash = $1 AND status = 'approved'",
    [tokenHash],
  );
  return rows[0]?.id ?? null;
}
