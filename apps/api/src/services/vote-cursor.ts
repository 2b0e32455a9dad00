/**
 * The `cursor` of GET /votes paging: base64url of `1.<bot id>.<voted_at in ms>.<vote id>`, the
 * position of the last vote of a page in the log's (voted_at, id) order, bound to the bot whose
 * log it walks. It is opaque to clients (the format may change with its version digit). It carries
 * no secret and needs none: it can only select a position in the holder's own log, and a cursor
 * of another bot is refused rather than read against this one.
 */
import { ApiError, isVoteLogTime } from "@botdir/schema";

export interface VoteCursor {
  botId: string;
  votedAtMs: number;
  /** vote_log.id (BIGSERIAL), as decimal text. */
  id: string;
}

const CURSOR_TEXT = /^1\.(\d{17,19})\.(\d{1,15})\.(\d{1,19})$/;
const MAX_VOTE_ID = 2n ** 63n - 1n;

export const CURSOR_MESSAGES = {
  malformed: "cursor is not a cursor this API issued.",
  foreign: "cursor belongs to another bot's vote log.",
} as const;

export function encodeVoteCursor(cursor: VoteCursor): string {
  return Buffer.from(`1.${cursor.botId}.${cursor.votedAtMs}.${cursor.id}`).toString("base64url");
}

/** The cursor, or the 400 for anything this API did not issue. */
export function decodeVoteCursor(raw: string): VoteCursor {
  const bytes = Buffer.from(raw, "base64url");
  // Node's decoder skips characters outside the alphabet: only the canonical spelling is accepted.
  const match = bytes.toString("base64url") === raw ? CURSOR_TEXT.exec(bytes.toString("latin1")) : null;
  const [, botId, ms, id] = match ?? [];
  if (botId === undefined || ms === undefined || id === undefined || BigInt(id) > MAX_VOTE_ID) {
    throw new ApiError("bad_request", CURSOR_MESSAGES.malformed);
  }
  const votedAtMs = Number(ms);
  // A position outside the years the log can be read from points nowhere: refused before any query.
  if (!isVoteLogTime(votedAtMs)) throw new ApiError("bad_request", CURSOR_MESSAGES.malformed);
  return { botId, votedAtMs, id };
}

/** The 400 for a cursor issued for another bot's log (checked once the token's bot is known). */
export function requireOwnCursor(cursor: VoteCursor | null, botId: string): void {
  if (cursor !== null && cursor.botId !== botId) throw new ApiError("bad_request", CURSOR_MESSAGES.foreign);
}
