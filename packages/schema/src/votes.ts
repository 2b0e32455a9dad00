import { z } from "zod";
import { BotId, UserId } from "./ids.js";

export const VOTE_WINDOW_MS = 12 * 60 * 60 * 1000;
export const VOTES_LIMIT = { min: 1, max: 100, default: 50 } as const;

export const CheckQuery = z.looseObject({
  userId: z.preprocess((v) => (Array.isArray(v) ? v[0] : v), UserId),
});
export type CheckQuery = z.infer<typeof CheckQuery>;

/** Outside the window: voted 0, hasVoted false, votedAt and nextVoteAt null. */
export const VoteCheckResult = z.object({
  voted: z.union([z.literal(0), z.literal(1)]),
  hasVoted: z.boolean(),
  votedAt: z.iso.datetime().nullable(),
  nextVoteAt: z.iso.datetime().nullable(),
});
export type VoteCheckResult = z.infer<typeof VoteCheckResult>;

/** `limit` is clamped to 1..100; anything that is not a number falls back to the default (50). */
export function clampLimit(raw: unknown): number {
  const value = Array.isArray(raw) ? raw[0] : raw;
  if (typeof value !== "string" && typeof value !== "number") return VOTES_LIMIT.default;
  const n = typeof value === "number" ? value : value.trim() === "" ? Number.NaN : Number(value);
  if (!Number.isFinite(n)) return VOTES_LIMIT.default;
  return Math.min(VOTES_LIMIT.max, Math.max(VOTES_LIMIT.min, Math.trunc(n)));
}

export const VotesQuery = z.looseObject({ limit: z.unknown().transform(clampLimit) });
export type VotesQuery = z.output<typeof VotesQuery>;

export const VoteEntry = z.object({ user_id: z.string(), voted_at: z.iso.datetime() });
export const VotesResponse = z.object({ votes: z.array(VoteEntry) });
export type VotesResponse = z.infer<typeof VotesResponse>;

/**
 * A vote is listed by `since`/`cursor` paging once it is this old. Votes are committed slightly out
 * of `voted_at` order (the time is taken before the statement that records it, on several
 * replicas), so the newest seconds of the log are withheld until every vote with an earlier time
 * has committed: a vote's statement runs within its 5-second statement timeout, and the rest is
 * margin for batching and clock skew. Without that, a page read just before a late commit would
 * move the cursor past it for good.
 */
export const VOTE_CURSOR_SETTLE_MS = 10_000;
/** Longest `cursor` accepted (those issued are about 60 characters). */
export const VOTE_CURSOR_MAX_LENGTH = 200;

const firstValue = (v: unknown) => (Array.isArray(v) ? v[0] : v);

/**
 * The instants a vote-log read accepts (`since`, a cursor's position), UTC: years 0001 to 9999.
 * Outside them `toISOString()` writes a year PostgreSQL refuses (`0000`, `-000001`, `+010000`),
 * so such an input is a 400 before any query.
 */
export const VOTE_TIME_RANGE = {
  min: Date.parse("0001-01-01T00:00:00.000Z"),
  max: Date.parse("9999-12-31T23:59:59.999Z"),
  text: "between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z (UTC)",
} as const;

/** Whether `ms` (epoch milliseconds) is an instant the vote log can be read from. */
export function isVoteLogTime(ms: number): boolean {
  return Number.isFinite(ms) && ms >= VOTE_TIME_RANGE.min && ms <= VOTE_TIME_RANGE.max;
}

const SINCE_FORMAT = "must be an ISO 8601 date-time with a time zone, e.g. 2026-11-21T12:00:00.000Z";
const IsoDateTime = z.iso.datetime({ offset: true });
/** A date-time whose year has a sign or more than four digits (`99999-…`, `+010000-…`): well formed, out of range. */
const EXPANDED_YEAR =
  /^(?:[+-][0-9]{4,}|[0-9]{5,})-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]+)?)?(?:Z|[+-][0-9]{2}:[0-9]{2})$/;

/** `since`: a date-time with a zone inside the readable years; one outside them, in any year form, is told the range. */
function checkSince(since: string, ctx: z.RefinementCtx): void {
  const outOfRange = { code: "custom", message: `must be ${VOTE_TIME_RANGE.text}` } as const;
  if (EXPANDED_YEAR.test(since)) ctx.addIssue(outOfRange);
  else if (!IsoDateTime.safeParse(since).success) ctx.addIssue({ code: "custom", message: SINCE_FORMAT });
  else if (!isVoteLogTime(Date.parse(since))) ctx.addIssue(outOfRange);
}

/**
 * GET /votes with `since` and/or `cursor`: the votes at or after `since` and after the cursor's
 * vote (both apply when both are given), oldest first. `cursor` is opaque here; the API decodes it.
 */
export const VotesPageQuery = z.looseObject({
  since: z.preprocess(firstValue, z.string(SINCE_FORMAT).superRefine(checkSince).optional()),
  cursor: z.preprocess(
    firstValue,
    z
      .string()
      .min(1, "must not be empty")
      .max(VOTE_CURSOR_MAX_LENGTH, "is not a cursor this API issued")
      .optional(),
  ),
  limit: z.unknown().optional().transform(clampLimit),
});
export type VotesPageQuery = z.output<typeof VotesPageQuery>;

/** A page of the vote log, oldest first; `nextCursor` is absent on the last page. */
export const VotesPage = z.object({
  votes: z.array(VoteEntry),
  nextCursor: z
    .string()
    .meta({ description: "Pass as `cursor` for the next page; absent when this page is the last." })
    .optional(),
});
export type VotesPage = z.infer<typeof VotesPage>;

/** Bounds of a vote's `query` (the vote page's query string): keys, and UTF-8 bytes of keys and values. */
export const VOTE_QUERY_MAX_KEYS = 20;
export const VOTE_QUERY_MAX_BYTES = 1024;
const QUERY_SHAPE = "must be a flat JSON object of string values";
const utf8 = new TextEncoder();

/**
 * The vote page's query string as the site parsed it: a flat map of strings, at most
 * VOTE_QUERY_MAX_KEYS keys and VOTE_QUERY_MAX_BYTES bytes. Each refusal is one sentence that names
 * `query`, never a caller's key.
 */
export const VoteQuery = z
  .record(z.string(), z.unknown(), { error: QUERY_SHAPE })
  .superRefine((query, ctx) => {
    const keys = Object.keys(query);
    if (keys.length > VOTE_QUERY_MAX_KEYS) {
      ctx.addIssue({ code: "custom", message: `must have at most ${VOTE_QUERY_MAX_KEYS} keys` });
      return;
    }
    let bytes = 0;
    for (const key of keys) {
      const value = query[key];
      if (typeof value !== "string") {
        ctx.addIssue({ code: "custom", message: QUERY_SHAPE });
        return;
      }
      bytes += utf8.encode(key).length + utf8.encode(value).length;
    }
    if (bytes > VOTE_QUERY_MAX_BYTES) {
      ctx.addIssue({
        code: "custom",
        message: `must be at most ${VOTE_QUERY_MAX_BYTES} bytes (keys and values, UTF-8)`,
      });
    }
  })
  .transform((query) => query as Record<string, string>)
  .meta({
    description: `The vote page's query string, e.g. {"ref": "discord-ad"}: a flat object of string values, at most ${VOTE_QUERY_MAX_KEYS} keys and ${VOTE_QUERY_MAX_BYTES} bytes of keys and values (UTF-8). Sent in vote.create as \`query\`; an empty object or null counts as none.`,
    additionalProperties: { type: "string" },
    maxProperties: VOTE_QUERY_MAX_KEYS,
  });

/** POST /internal/v1/votes (site frontend → vote-ingest). */
export const CastVoteBody = z.looseObject({ bot_id: BotId, user_id: UserId, query: VoteQuery.nullish() });
export type CastVoteBody = z.infer<typeof CastVoteBody>;

export const CastVoteResponse = z.object({ vote: VoteEntry, nextVoteAt: z.iso.datetime() });
export type CastVoteResponse = z.infer<typeof CastVoteResponse>;

export const VoteConflict = z.object({ error: z.string(), nextVoteAt: z.iso.datetime() });
